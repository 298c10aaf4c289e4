"""`srgan compare`, `srgan evaluate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from srgan.cli.common import DEVICE_HELP, PRECISION_HELP, generator_from_option, runtime_from_options

DEGRADE_HELP = (
    "A config (preset or YAML) with data.degradation realesrgan: each LR is degraded by its pipeline instead of "
    "bicubic, from a generator fixed by its train.seed and the image's name (the same LR on every call)."
)


def degrade_option(config: str | None):
    """--degrade CONFIG -> (its data.realesrgan, its train.seed), or None."""
    if config is None:
        return None
    from srgan.configs import SrganError, load_config

    resolved = load_config(config)
    if resolved.data.degradation != "realesrgan":
        raise SrganError(
            f"--degrade {config}: data.degradation is {resolved.data.degradation}; expected a config with "
            "data.degradation realesrgan (e.g. realesrgan_demo)"
        )
    return resolved.data.realesrgan, resolved.train.seed


def compare(
    checkpoint: Annotated[Path, typer.Argument(help="A checkpoint file or a run folder.")],
    image: Annotated[Path, typer.Argument(help="A high-resolution photo; its LR version is made by bicubic.")],
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="The picture to write (.png).",
        ),
    ] = Path("comparison.png"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output.")] = False,
    degrade: Annotated[str | None, typer.Option("--degrade", help=DEGRADE_HELP)] = None,
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
) -> None:
    """Write bicubic | SR | original side by side for one photo, with their PSNRs."""
    from srgan.configs import SrganError
    from srgan.files import check_output
    from srgan.inference.compare import compare_picture
    from srgan.inference.metrics import CONVENTION

    if output.suffix.lower() != ".png":
        raise SrganError(f"-o {output}: expected a file name ending in .png")
    check_output(output, force, inputs=(image,))  # before loading anything
    degradation = degrade_option(degrade)
    runtime = runtime_from_options(device, precision)
    generator = generator_from_option(checkpoint, runtime)
    scores = compare_picture(generator, runtime, image, output, force, degradation)
    typer.echo(
        f"{output}: bicubic | SR | original; LR by {'bicubic' if degrade is None else degrade}; "
        f"PSNR bicubic {scores['bicubic_psnr']:.2f} dB, "
        f"SR {scores['sr_psnr']:.2f} dB ({CONVENTION.format(scale=generator.scale)})"
    )


def evaluate(
    folders: Annotated[
        list[Path], typer.Argument(help="Folders of high-resolution images (e.g. Set5, Set14), or image files.")
    ],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", "-k", help="A checkpoint file or a run folder.")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the scores to this JSON file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --json file.")] = False,
    degrade: Annotated[str | None, typer.Option("--degrade", help=DEGRADE_HELP)] = None,
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP + " Default fp32: figures to quote.")] = "fp32",
) -> None:
    """PSNR/SSIM of SR and of bicubic per image and on average, as the literature computes them."""
    from srgan.files import check_output, write_text
    from srgan.inference.evaluate import evaluate_folders, format_table

    if json_path is not None:
        check_output(json_path, force)  # before the work, not after it
    degradation = degrade_option(degrade)
    runtime = runtime_from_options(device, precision)
    generator = generator_from_option(checkpoint, runtime)
    result = evaluate_folders(generator, runtime, folders, degradation)
    typer.echo(format_table(result))
    if json_path is not None:
        write_text(json_path, json.dumps(result, indent=2) + "\n", overwrite=force)
    if result["failed"]:
        total = len(result["images"]) + len(result["failed"])
        typer.echo(f"srgan: {len(result['failed'])} of {total} images failed (not in the means):", err=True)
        for why in result["failed"]:
            typer.echo(f"  {why}", err=True)
        raise typer.Exit(1)
