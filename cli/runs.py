"""`srgan runs`: a table of the runs below a folder, best validation first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def runs(
    folder: Annotated[Path, typer.Argument(help="A folder of run folders (searched recursively).")] = Path("runs"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """One row a run: its settings against its preset, steps done / planned, state, best
    validation PSNR/SSIM with bicubic's, the last d_loss, g_loss, d_score, g_score, wall time."""
    # torch loads here (srgan.training), not at start-up: srgan --help stays fast
    from srgan.training.runs import find_runs, format_runs, rows_as_json, sort_rows, summarize

    rows = sort_rows([summarize(run) for run in find_runs(folder)])
    if as_json:
        typer.echo(rows_as_json(rows))
    elif rows:
        typer.echo(format_runs(rows, folder))
    else:
        typer.echo(f"{folder}: no run folders (with a config.yaml) below it")
