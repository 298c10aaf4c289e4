"""`srgan plot`: the curves of one run or of several, overlaid."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def plot(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Run folders (a folder of runs, e.g. a sweep, stands for all of them).",
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="A .png file. Default for one run: "
            "RUN/curves.png (the run's own picture, redrawn); needed for several.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing -o file.")] = False,
    names: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="The legend's name of each run, in the order given "
            "(repeat it; default: the settings in which the runs differ).",
        ),
    ] = None,
    psnr_only: Annotated[
        bool,
        typer.Option(
            "--psnr-only",
            help="Only the validation PSNR panel, larger "
            "(learning curves compared, as in docs/quality.md).",
        ),
    ] = False,
) -> None:
    """Validation PSNR, g_loss, d_loss, d_score and g_score against step, one colour a run,
    the legend naming the settings in which the runs differ (needs matplotlib)."""
    from srgan.configs import SrganError
    from srgan.training.runs import find_runs, run_labels

    folders = []
    for run in runs:
        if (run / "metrics.jsonl").is_file():
            folders.append(run)
        elif run.is_dir() and (found := [r for r in find_runs(run) if (r / "metrics.jsonl").is_file()]):
            folders.extend(found)
        else:
            raise SrganError(f"{run}: not a run folder (no metrics.jsonl), nor a folder of runs")
    if output is None and len(folders) > 1:
        raise SrganError(f"-o: {len(folders)} runs to draw: name the picture to write, e.g. -o runs.png")
    if output is not None and output.suffix.lower() != ".png":
        raise SrganError(f"-o {output}: expected a file name ending in .png")
    if names and len(names) != len(folders):
        raise SrganError(f"--label: {len(names)} given for {len(folders)} runs; give one a run, in order")
    labels = names or (run_labels(folders) if len(folders) > 1 else None)
    try:
        from srgan.training.pictures import draw_curves

        out = output or folders[0] / "curves.png"
        typer.echo(draw_curves(folders, out, overwrite=output is None or force, labels=labels,
                                       psnr_only=psnr_only))
    except ImportError:
        raise SrganError("srgan plot needs matplotlib: pip install 'srgan[plot]'") from None
