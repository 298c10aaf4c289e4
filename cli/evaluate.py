"""`srgan compare`."""
from __future__ import annotations

from pathlib import Path

import typer

from srgan.cli.common import DEVICE_HELP, PRECISION_HELP, generator_from_option, runtime_from_options


def compare(
    checkpoint: Path = typer.Argument(..., help="A checkpoint file or a run folder."),
    image: Path = typer.Argument(..., help="A high-resolution photo; its LR version is made by bicubic."),
    output: Path = typer.Option(Path("comparison.png"), "--output", "-o", help="The picture to write."),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    precision: str = typer.Option("auto", help=PRECISION_HELP),
) -> None:
    """Write bicubic | SR | original side by side for one photo, with their PSNRs."""
    from srgan.inference.compare import compare_picture
    from srgan.inference.metrics import CONVENTION

    runtime = runtime_from_options(device, precision)
    generator = generator_from_option(checkpoint, runtime)
    scores = compare_picture(generator, runtime, image, output)
    typer.echo(
        f"{output}: bicubic | SR | original; PSNR bicubic {scores['bicubic_psnr']:.2f} dB, "
        f"SR {scores['sr_psnr']:.2f} dB ({CONVENTION.format(scale=generator.scale)})"
    )
