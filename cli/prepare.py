"""`srgan prepare`: decode a training set once into a dataset that crops are sliced from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from srgan.files.errors import SrganError


def prepare(
    sources: Annotated[list[Path], typer.Argument(help="Folders of images (searched recursively) or image files.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The dataset folder to write (use it as data.train).")],
    workers: Annotated[int, typer.Option("--workers", help="Images decoded at once.")] = os.cpu_count() or 1,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing prepared dataset.")] = False,
    lr: Annotated[
        Path | None,
        typer.Option(
            "--lr",
            help="A folder of LR images, matched to the one HR folder's by relative path less extension: "
            "a paired set (docs/paired.md). Needs --scale.",
        ),
    ] = None,
    scale: Annotated[int | None, typer.Option("--scale", help="The pairs' scale (HR = LR x scale), with --lr.")] = None,
) -> None:
    """Decode every image once (any mode, EXIF upright) into DATASET/pixels.u8 + index.json:
    training then slices crops from it instead of decoding a photo per crop."""
    from srgan.data import prepare_dataset  # torch loads here, not at start-up: srgan --help stays fast

    if workers < 1:
        raise SrganError(f"--workers: expected at least 1, got {workers}")
    if scale is not None and lr is None:
        raise SrganError("--scale: only with --lr (pairs); a set of HR images alone has no scale")
    summary = prepare_dataset(sources, output, workers, force, lr, scale)
    skipped = f", {summary['skipped']} skipped (see the warnings)" if summary["skipped"] else ""
    size = f"{summary['bytes'] / 1e9:.2f} GB" if summary["bytes"] >= 1e9 else f"{summary['bytes'] / 1e6:.1f} MB"
    what = "images" if lr is None else f"x{scale} pairs"
    typer.echo(f"{output}: {summary['images']} {what}, {size}{skipped}; train on it with --set data.train={output}")
