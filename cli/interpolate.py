"""`srgan interpolate` (models/interpolate.py: the blend; inference/export.py: the file written)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from srgan.cli.common import CHECKPOINT_HELP


def interpolate(
    first: Annotated[Path, typer.Argument(help="Generator A (alpha 0): " + CHECKPOINT_HELP)],
    second: Annotated[Path, typer.Argument(help="Generator B (alpha 1), of A's architecture and shape.")],
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="The blended generator: .pth (BasicSR's {params_ema: ...}: rrdb, compact, spandrel's "
            "networks) or .safetensors (every architecture; srgan reads its settings back).",
        ),
    ],
    alpha: Annotated[
        float, typer.Option("--alpha", help="0 gives A, 1 gives B, 0.3: (1 - 0.3) * A + 0.3 * B; 0 to 1.")
    ] = 0.5,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing output (never A or B).")] = False,
) -> None:
    """Blend two generators of the same architecture weight by weight (ESRGAN's network interpolation):
    a strength between a PSNR model and a GAN model without training again."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.files import check_output
    from srgan.inference.export import export_format, export_generator
    from srgan.models.checkpoint import resolve_checkpoint_path
    from srgan.models.interpolate import check_alpha, load_blended_generator

    alpha = check_alpha(alpha)
    kind = export_format(output)
    if kind == "onnx":
        from srgan.files.errors import SrganError

        raise SrganError(f"-o {output}: expected .pth or .safetensors (srgan export makes an .onnx of the result)")
    inputs = (resolve_checkpoint_path(first), resolve_checkpoint_path(second))
    check_output(output, force, inputs)  # before loading anything
    generator, model = load_blended_generator(first, second, alpha)
    report = export_generator(generator, output, overwrite=force, inputs=inputs, source=first)
    typer.echo(f"{report.path}: {model}; read back, largest difference {report.max_abs_diff:.2g}")
