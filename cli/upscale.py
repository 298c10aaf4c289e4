"""`srgan upscale`."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from srgan.cli.common import DEVICE_HELP, PRECISION_HELP, generator_from_option, runtime_from_options


def upscale(
    inputs: List[Path] = typer.Argument(..., help="Image files or folders of images."),
    checkpoint: Path = typer.Option(..., "--checkpoint", "-k", help="A checkpoint file or a run folder."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="A folder (or a .png for one input)."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing outputs."),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    precision: str = typer.Option("auto", help=PRECISION_HELP),
) -> None:
    """Upscale images with a trained generator: <stem>_x<scale>.png beside each input or in -o."""
    from srgan.inference import upscale_files

    runtime = runtime_from_options(device, precision)
    generator = generator_from_option(checkpoint, runtime)
    for written in upscale_files(generator, runtime, inputs, output, force):
        typer.echo(written)
