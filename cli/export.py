"""`srgan export`: a model leaves the project as .onnx, .safetensors or a BasicSR .pth
(the work in inference/export.py; docs/export.md says how to run each)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from srgan.files import check_output


def export(
    source: Annotated[
        Path, typer.Argument(help="A run folder, a checkpoint, or any generator file srgan upscale reads.")
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="The file to write; its extension picks the format: .onnx/.safetensors/.pth."
        ),
    ],
    fp16: Annotated[
        bool,
        typer.Option("--fp16", help="Half-precision weights (and, for .onnx, compute; its input/output stay float32)."),
    ] = False,
    opset: Annotated[int | None, typer.Option("--opset", help="The ONNX opset (18 to 23; default 18).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing FILE.")] = False,
) -> None:
    """Write a trained generator for other tools: ONNX (onnxruntime, chaiNNer), safetensors
    (srgan, spandrel), or BasicSR's .pth (Real-ESRGAN's scripts, chaiNNer); checked by
    reading it back before it is written."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.inference.export import export_format, export_generator
    from srgan.models import resolve_checkpoint_path
    from srgan.models.checkpoint import load_generator

    export_format(output)  # refuse a bad extension or an existing file before reading the model
    checkpoint = resolve_checkpoint_path(source)
    check_output(output, force, (checkpoint,))
    report = export_generator(load_generator(checkpoint), output, fp16, opset, force, (checkpoint,), checkpoint)
    opset_part = f", opset {report.opset}" if report.opset is not None else ""
    if report.batch is not None:  # spandrel's windowed transformers: inference/export.onnx_bytes says why
        opset_part += f", batch {report.batch} only (height and width any)"
    typer.echo(
        f"{report.path}: {report.arch} x{report.scale}, {report.format} {report.precision}{opset_part}; "
        f"read back and run on {' and '.join('x'.join(map(str, s)) for s in report.checked)}: largest difference "
        f"from srgan's fp32 output {report.max_abs_diff:.2e} (tolerance {report.tolerance:.0e})"
    )
