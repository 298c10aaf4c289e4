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
            help="Only the validation panel (--metric), larger (learning curves compared, as in docs/quality.md).",
        ),
    ] = False,
    metric: Annotated[
        str,
        typer.Option(
            "--metric",
            help="The validation metric drawn: psnr, ssim, lpips, lpips_vgg, dists or ciede2000 (those the runs "
            "validated with).",
        ),
    ] = "psnr",
) -> None:
    """Validation PSNR (or --metric), g_loss, d_loss, d_score and g_score against step, one colour a run,
    the legend naming the settings in which the runs differ (needs matplotlib)."""
    from srgan.training.runs import plot_runs  # torch loads here, not at start-up: srgan --help stays fast

    typer.echo(plot_runs(runs, output, force, names, psnr_only, metric))
