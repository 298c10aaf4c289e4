"""`srgan plot`: the curves of one run or of several, overlaid."""

from __future__ import annotations

import logging
import os
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
            help="The validation metric drawn: psnr, ssim, lpips, lpips_vgg or dists (those the runs validated with).",
        ),
    ] = "psnr",
) -> None:
    """Validation PSNR (or --metric), g_loss, d_loss, d_score and g_score against step, one colour a run,
    the legend naming the settings in which the runs differ (needs matplotlib)."""
    from srgan.configs import Config
    from srgan.files.errors import SrganError
    from srgan.metrics import parse_metric_names
    from srgan.training.logs import read_run_logs
    from srgan.training.runs import find_runs, read_run_config, run_labels

    if len(parse_metric_names(metric, "--metric")) != 1:
        raise SrganError(f"--metric {metric}: expected one metric")

    def is_run(folder: Path) -> bool:  # whatever its metrics.jsonl is: a FIFO in its place is a broken run, said so
        return os.path.lexists(folder / "metrics.jsonl")

    folders = []
    for run in runs:
        if is_run(run):
            folders.append(run)
        elif run.is_dir() and (found := [r for r in find_runs(run) if is_run(r)]):
            folders.extend(found)
        else:
            raise SrganError(f"{run}: not a run folder (no metrics.jsonl), nor a folder of runs")
    if output is None and len(folders) > 1:
        raise SrganError(f"-o: {len(folders)} runs to draw: name the picture to write, e.g. -o runs.png")
    if output is not None and output.suffix.lower() != ".png":
        raise SrganError(f"-o {output}: expected a file name ending in .png")
    if names and len(names) != len(folders):
        raise SrganError(f"--label: {len(names)} given for {len(folders)} runs; give one a run, in order")
    # A broken run among several is skipped, saying why; the others are drawn.
    names = names or []
    drawn: list[Path] = []
    series: list[tuple[list[dict], list[dict]]] = []
    configs: list[Config] = []  # for the legend, when it is made from the settings
    kept_names: list[str] = []
    for i, folder in enumerate(folders):
        try:
            logs = read_run_logs(folder)
            config = read_run_config(folder) if len(folders) > 1 and not names else None
        except SrganError as error:
            if len(folders) == 1:
                raise
            logging.getLogger("srgan").warning("skipping %s: %s", folder, error)
            continue
        drawn.append(folder)
        series.append(logs)
        if config is not None:
            configs.append(config)
        kept_names.extend(names[i : i + 1])
    if not drawn:
        raise SrganError(
            f"{' '.join(map(str, runs))}: no run to draw: the {len(folders)} found are all broken "
            "(the lines above say how)"
        )
    labels = kept_names or (run_labels(drawn, configs) if len(drawn) > 1 else None)
    try:
        from srgan.training.pictures import draw_curves

        out = output or drawn[0] / "curves.png"
        typer.echo(
            draw_curves(
                drawn,
                out,
                overwrite=output is None or force,
                labels=labels,
                psnr_only=psnr_only,
                series=series,
                metric=metric,
            )
        )
    except ImportError:
        raise SrganError("srgan plot needs matplotlib: pip install 'srgan[plot]'") from None
