"""The `srgan` command. Each command (one module per concern beside this
one) parses its arguments, loads what it needs and calls one function;
here user errors become exit status 2 with a one-line message."""
from __future__ import annotations

import logging
import sys

import typer

from srgan.cli import bench, evaluate, train, upscale
from srgan.configs import SrganError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train SRGAN super-resolution models and use them.",
)
app.command("train")(train.train)
app.command("upscale")(upscale.upscale)
app.command("compare")(evaluate.compare)
app.command("evaluate")(evaluate.evaluate)
app.command("plot")(evaluate.plot)
app.command("samples")(train.samples)

config_app = typer.Typer(no_args_is_help=True, help="The config presets and how a config resolves.")
config_app.command("list")(train.config_list)
config_app.command("show")(train.config_show)
app.add_typer(config_app, name="config")
app.add_typer(bench.bench_app, name="bench")


class _TqdmHandler(logging.Handler):
    """Messages go to stderr without breaking a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        prefix = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        tqdm.write(prefix + record.getMessage(), file=sys.stderr)


def _setup_logging() -> None:
    logger = logging.getLogger("srgan")
    if not any(isinstance(h, _TqdmHandler) for h in logger.handlers):
        logger.addHandler(_TqdmHandler())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def main() -> None:
    _setup_logging()
    try:
        app()
    except SrganError as error:
        print(f"srgan: error: {error}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("srgan: interrupted", file=sys.stderr)
        sys.exit(130)
