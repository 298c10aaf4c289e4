"""The `srgan` command. Each command (one module per concern beside this
one) parses its arguments, loads what it needs and calls one function;
here user errors become exit status 2 with a one-line message."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import warnings

import typer
from PIL import Image

from srgan.cli import bench, degrade, evaluate, export, interpolate, plot, prepare, runs, train, upscale
from srgan.files.errors import SrganError
from srgan.files.inputs import command_inputs

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
app.command("plot")(plot.plot)
app.command("runs")(runs.runs)
app.command("prepare")(prepare.prepare)
app.command("samples")(train.samples)
app.command("export")(export.export)
app.command("interpolate")(interpolate.interpolate)
app.command("degrade")(degrade.degrade)

config_app = typer.Typer(no_args_is_help=True, help="The config presets and how a config resolves.")
config_app.command("list")(train.config_list)
config_app.command("show")(train.config_show)
config_app.command("archs")(train.config_archs)
app.add_typer(config_app, name="config")
app.add_typer(bench.bench_app, name="bench")


class _TqdmHandler(logging.Handler):
    """Messages go to stderr without breaking a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm  # loads at the first message, not at start-up: srgan --help stays fast

        prefix = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        tqdm.write(prefix + record.getMessage(), file=sys.stderr)


def _setup_logging() -> None:
    logger = logging.getLogger("srgan")
    if not any(isinstance(h, _TqdmHandler) for h in logger.handlers):
        logger.addHandler(_TqdmHandler())
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _print_error(line: str) -> None:
    """`line` on stderr; under torchrun (WORLD_SIZE > 1) only from the first
    rank to meet it, not once a rank."""
    if os.environ.get("WORLD_SIZE", "1") not in ("", "0", "1"):
        from srgan.training.distributed import first_to_report  # torch: only under torchrun

        if not first_to_report(line):
            return
    print(line, file=sys.stderr)


class Terminated(BaseException):
    """SIGTERM, raised wherever the program stands, as Ctrl-C raises
    KeyboardInterrupt, so that the same clean-up runs (a temporary file
    being written is removed, video threads stop) and no `except Exception`
    takes it for a failure. Not a KeyboardInterrupt: typer turns that into a
    silent exit 130. Training records the signal instead (training/signals.py)
    and saves first."""


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While active, SIGTERM (kill, systemd, Slurm) ends the command as Ctrl-C
    does instead of killing it where it stands, which would leave behind the
    temporary file of an output being written. A second SIGTERM kills at once."""

    def handle(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    try:
        previous, taken = signal.signal(signal.SIGTERM, handle), True
    except ValueError:  # main() called from another thread: signals are the main thread's
        previous, taken = None, False
    try:
        yield
    finally:
        if taken:
            signal.signal(signal.SIGTERM, previous)


def main(args: list[str] | None = None) -> None:
    """Run a command; every mistake a user can make ends in one line on
    stderr and exit status 2 (1 for a batch in which some items failed)."""
    _setup_logging()
    # srgan states its own pixel limit (srgan.data.images.MAX_IMAGE_PIXELS) and
    # checks it before decoding: Pillow's warning below that limit is noise.
    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
    command = typer.main.get_command(app)
    try:
        with command_inputs(), sigterm_as_interrupt():
            code = command.main(args=sys.argv[1:] if args is None else args, prog_name="srgan", standalone_mode=False)
    except typer.TyperException as error:  # usage errors: a missing argument, an option of the wrong type
        context = getattr(error, "ctx", None)
        hint = f" (see: {context.command_path} --help)" if context is not None else ""
        _print_error(f"srgan: error: {error.format_message()}{hint}")
        sys.exit(getattr(error, "exit_code", 2))
    except typer.Abort:
        print("srgan: aborted", file=sys.stderr)
        sys.exit(1)
    except SrganError as error:
        _print_error(f"srgan: error: {error}")
        sys.exit(error.exit_code)
    except Terminated:
        print("srgan: terminated", file=sys.stderr)
        sys.exit(128 + signal.SIGTERM)
    except KeyboardInterrupt:
        print("srgan: interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except BrokenPipeError:  # `srgan config show | head`: the reader has gone
        sys.stderr.close()
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
