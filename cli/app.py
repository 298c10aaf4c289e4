"""The `srgan` command. Each command parses its arguments, loads what it
needs, calls one function and maps user errors to exit status 2."""
from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import List, Optional

import typer

from srgan.configs import SrganError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train SRGAN super-resolution models and use them.",
)
config_app = typer.Typer(no_args_is_help=True, help="The config presets and how a config resolves.")
app.add_typer(config_app, name="config")

CONFIG_HELP = "A preset name (see `srgan config list`) or a YAML file. Default: demo."
SET_HELP = "Override one key, e.g. --set train.epochs=5 (repeatable; values are YAML scalars)."


@app.command()
def train(
    config: Optional[str] = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    overrides: List[str] = typer.Option([], "--set", "-s", help=SET_HELP),
) -> None:
    """Train a generator and discriminator as the config says."""
    from srgan.configs import load_config

    resolved = load_config(config, overrides)  # before importing torch: bad keys fail fast
    from srgan.training import train as run_training

    run_training(resolved)


@app.command()
def upscale(
    inputs: List[Path] = typer.Argument(..., help="Image files or folders of images."),
    checkpoint: Path = typer.Option(..., "--checkpoint", "-k", help="A checkpoint file or a run folder."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="A folder (or a .png for one input)."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing outputs."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    precision: str = typer.Option("auto", help="auto, fp32, bf16 or fp16 (CUDA only)."),
) -> None:
    """Upscale images with a trained generator: <stem>_x<scale>.png beside each input or in -o."""
    from srgan.inference import upscale_files
    from srgan.models import generator_from_checkpoint, load_checkpoint, resolve_checkpoint_path

    runtime = _runtime(device, precision)
    path = resolve_checkpoint_path(checkpoint)
    generator = generator_from_checkpoint(load_checkpoint(path), str(path)).to(runtime.device)
    for written in upscale_files(generator, runtime, inputs, output, force):
        typer.echo(written)


@app.command()
def compare(
    checkpoint: Path = typer.Argument(..., help="A checkpoint file or a run folder."),
    image: Path = typer.Argument(..., help="A high-resolution photo; its LR version is made by bicubic."),
    output: Path = typer.Option(Path("comparison.png"), "--output", "-o", help="The picture to write."),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    precision: str = typer.Option("auto", help="auto, fp32, bf16 or fp16 (CUDA only)."),
) -> None:
    """Write bicubic | SR | original side by side for one photo, with their PSNRs."""
    from srgan.inference.compare import compare_picture
    from srgan.inference.metrics import CONVENTION
    from srgan.models import generator_from_checkpoint, load_checkpoint, resolve_checkpoint_path

    runtime = _runtime(device, precision)
    path = resolve_checkpoint_path(checkpoint)
    generator = generator_from_checkpoint(load_checkpoint(path), str(path)).to(runtime.device)
    scores = compare_picture(generator, runtime, image, output)
    typer.echo(
        f"{output}: bicubic | SR | original; PSNR bicubic {scores['bicubic_psnr']:.2f} dB, "
        f"SR {scores['sr_psnr']:.2f} dB ({CONVENTION.format(scale=generator.scale)})"
    )


@app.command()
def samples(
    folder: Path = typer.Argument(..., help="Where to write the built-in photos."),
) -> None:
    """Copy the built-in sample photos (builtin:samples) into FOLDER/train and FOLDER/val."""
    from srgan.data.samples import TRAIN_SAMPLES, VAL_SAMPLES, sample_paths

    for part, names in (("train", TRAIN_SAMPLES), ("val", VAL_SAMPLES)):
        (folder / part).mkdir(parents=True, exist_ok=True)
        for name, source in zip(names, sample_paths(names)):
            target = folder / part / f"{name}{source.suffix}"
            shutil.copyfile(source, target)
            typer.echo(target)


@config_app.command("list")
def config_list() -> None:
    """The presets, one per line."""
    from srgan.configs import preset_names

    for name in preset_names():
        typer.echo(name)


@config_app.command("show")
def config_show(
    name: str = typer.Argument("demo", help=CONFIG_HELP),
    overrides: List[str] = typer.Option([], "--set", "-s", help=SET_HELP),
) -> None:
    """Print a config fully resolved (defaults and overrides applied), as YAML."""
    from srgan.configs import config_to_yaml, load_config

    typer.echo(config_to_yaml(load_config(name, overrides)), nl=False)


def _runtime(device: str, precision: str):
    from srgan.models import resolve_runtime

    if device not in ("auto", "cpu", "cuda"):
        raise SrganError(f"--device: expected auto, cpu or cuda, got {device!r}")
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise SrganError(f"--precision: expected auto, fp32, bf16 or fp16, got {precision!r}")
    return resolve_runtime(device, precision)


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
