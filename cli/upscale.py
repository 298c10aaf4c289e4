"""`srgan upscale`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from srgan.cli.common import (
    BLEND_ALPHA_HELP,
    BLEND_HELP,
    CHECKPOINT_HELP,
    DEVICE_HELP,
    PRECISION_HELP,
    generator_from_option,
    runtime_from_options,
)
from srgan.files.errors import SrganError


def upscale(
    inputs: Annotated[list[Path], typer.Argument(help="Image or video files, or folders of them.")],
    checkpoint: Annotated[
        Path,
        typer.Option(
            "--checkpoint",
            "-k",
            help=CHECKPOINT_HELP,
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="A folder, or for one input a file name: .png/.jpg/.webp for an image, "
            ".mp4/.mkv/.mov for a video. Default: beside each input.",
        ),
    ] = None,
    ext: Annotated[
        str,
        typer.Option(
            "--ext",
            help="png, jpg or webp (images with alpha stay png when jpg is asked).",
        ),
    ] = "png",
    quality: Annotated[int, typer.Option("--quality", help="jpg and webp quality, 1-100.")] = 95,
    suffix: Annotated[str | None, typer.Option("--suffix", help="Added to each stem. Default: _x<scale>.")] = None,
    outscale: Annotated[
        float | None,
        typer.Option(
            "--outscale",
            help="Final scale, any number > 0: the network's output is resized (Lanczos) to it.",
        ),
    ] = None,
    tile: Annotated[
        str,
        typer.Option(
            "--tile",
            help="Tile side in input pixels; 0 = the whole image at once; auto = sized to free memory.",
        ),
    ] = "auto",
    tile_pad: Annotated[
        str,
        typer.Option(
            "--tile-pad",
            help="Context pixels each tile reads on every side. auto: measured on the network's weights once "
            "(cached), the smallest pad whose seams stay at 1/4 of an 8-bit level on a test image, at most the "
            "receptive radius or 128 (docs/tiling.md); the first line says which.",
        ),
    ] = "auto",
    alpha: Annotated[str, typer.Option("--alpha", help="How alpha is upscaled: bicubic or network.")] = "bicubic",
    batch: Annotated[
        int,
        typer.Option(
            "--batch",
            help="Video frames per forward pass (fewer if they do not fit in memory).",
        ),
    ] = 4,
    crf: Annotated[
        int,
        typer.Option(
            "--crf",
            help="H.264 quality of videos: 0 lossless, 18 near-transparent, 51 worst.",
        ),
    ] = 18,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Videos: also write <stem>_x<scale>_compare.mp4, bicubic | SR side by side.",
        ),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing outputs.")] = False,
    blend: Annotated[Path | None, typer.Option("--blend", help=BLEND_HELP)] = None,
    blend_alpha: Annotated[float | None, typer.Option("--blend-alpha", help=BLEND_ALPHA_HELP)] = None,
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
) -> None:
    """Upscale images and videos with a trained generator: <stem>_x<scale>.png (videos: .mp4, every frame, the
    same timestamps, the sound copied) beside each input or in -o."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.inference.options import UpscaleOptions
    from srgan.inference.upscale import upscale_files
    from srgan.inference.video import is_video

    options = UpscaleOptions(
        tile=_tile_option(tile),
        tile_pad=_tile_pad_option(tile_pad),
        ext=_ext_option(ext),
        quality=_quality_option(quality),
        suffix=suffix,
        outscale=_outscale_option(outscale),
        alpha=_alpha_option(alpha),
        force=force,
        fp32_for_16bit=precision == "auto",
        batch=_batch_option(batch),
        crf=_crf_option(crf),
        compare=compare,
    )
    runtime = runtime_from_options(device, precision)
    generator, model, runtime = generator_from_option(
        checkpoint, runtime, say_precision=False, blend=blend, blend_alpha=blend_alpha
    )
    report = upscale_files(generator, runtime, inputs, output, options, model)  # SIGTERM: see cli/app.py
    for written in report.written:
        typer.echo(written)
    if report.failed:
        videos = any(is_video(path) for path in [*report.written, *(source for source, _ in report.failed)])
        noun = "files" if videos else "images"
        typer.echo(f"srgan: {len(report.failed)} of {report.inputs} {noun} failed:", err=True)
        for _, why in report.failed:
            typer.echo(f"  {why}", err=True)
        raise typer.Exit(1)


def _pixels_or_auto(value: str, option: str, expected: str) -> int | None:
    """--tile and --tile-pad: None for auto, else a number of pixels >= 0."""
    if value == "auto":
        return None
    try:
        pixels = int(value)
    except ValueError:
        pixels = -1
    if pixels < 0:
        raise SrganError(f"{option}: expected {expected}, got {value!r}")
    return pixels


def _tile_option(value: str) -> int | None:
    return _pixels_or_auto(value, "--tile", "auto or a number of pixels >= 0 (0: no tiling)")


def _tile_pad_option(value: str) -> int | None:
    return _pixels_or_auto(value, "--tile-pad", "auto or a number of pixels >= 0")


def _ext_option(value: str) -> str:
    ext = value.lower().lstrip(".")
    ext = "jpg" if ext == "jpeg" else ext
    if ext not in ("png", "jpg", "webp"):
        raise SrganError(f"--ext: expected png, jpg or webp, got {value!r}")
    return ext


def _quality_option(value: int) -> int:
    if not 1 <= value <= 100:
        raise SrganError(f"--quality: expected 1 to 100, got {value}")
    return value


def _outscale_option(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise SrganError(f"--outscale: expected a number > 0, got {value}")
    return value


def _batch_option(value: int) -> int:
    if value < 1:
        raise SrganError(f"--batch: expected a number of frames >= 1, got {value}")
    return value


def _crf_option(value: int) -> int:
    if not 0 <= value <= 51:
        raise SrganError(f"--crf: expected 0 to 51 (H.264's range), got {value}")
    return value


def _alpha_option(value: str) -> str:
    if value not in ("bicubic", "network"):
        raise SrganError(f"--alpha: expected bicubic or network, got {value!r}")
    return value
