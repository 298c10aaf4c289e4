"""`srgan degrade`: a contact sheet of degraded LR crops beside their GT crops."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from srgan.cli.common import CONFIG_HELP, SET_HELP
from srgan.files import check_output
from srgan.files.errors import SrganError

MAX_COUNT = 256  # rows of the sheet: a picture to look at, not a dataset


def degrade(
    source: Annotated[Path, typer.Argument(help="An image, a folder of images or a prepared dataset.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The sheet to write (.png).")],
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = "realesrnet_x4",
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="Crops on the sheet.")] = 8,
    seed: Annotated[int | None, typer.Option("--seed", help="Default: the config's train.seed.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output.")] = False,
) -> None:
    """Write N training pairs as the config makes them: each LR crop (nearest-upscaled) beside its GT crop."""
    # the config loader (yaml) here and torch below load in the command, not at start-up: srgan --help stays fast
    from srgan.configs import load_config
    from srgan.configs.checks import MAX_SEED

    if output.suffix.lower() != ".png":
        raise SrganError(f"-o {output}: expected a file name ending in .png")
    if not 1 <= count <= MAX_COUNT:
        raise SrganError(f"--count: expected 1 to {MAX_COUNT}, got {count}")
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise SrganError(f"--seed: expected 0 to {MAX_SEED}, got {seed}")
    check_output(output, force, inputs=(source,))  # before the work
    resolved = load_config(config, overrides or [])
    from srgan.data.contact_sheet import (
        degradation_sheet,
        source_images,
    )
    from srgan.inference.imageio import write_png

    images = source_images(source, resolved.data.crop_size)
    seed = resolved.train.seed if seed is None else seed
    sheet = degradation_sheet(images, resolved, count, seed)
    write_png(sheet, output, overwrite=force, inputs=(source,))
    d = resolved.data
    typer.echo(
        f"{output}: {count} crops of {d.crop_size} px from {source}, LR x{resolved.model.scale} by "
        f"{d.degradation} (seed {seed}), nearest-upscaled | GT"
    )
