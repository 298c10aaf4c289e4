"""`srgan compare`, `srgan evaluate`."""

from __future__ import annotations

import json
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
from srgan.files import check_output, write_text
from srgan.files.errors import SrganError

METRICS_HELP = (
    "Comma-separated: psnr, ssim (Y channel), lpips (AlexNet), lpips_vgg, dists (RGB, lower is better; "
    "these need the metrics extra and torchvision's ImageNet weights in TORCH_HOME/hub/checkpoints), ciede2000 "
    "(colour drift in CIELAB: mean and 99th-percentile CIEDE2000, lower is better, and the a*/b* shifts of SR - HR)."
)


DEGRADE_HELP = (
    "A config (preset or YAML) with data.degradation realesrgan: each LR is degraded by its pipeline instead of "
    "bicubic, from a generator fixed by its train.seed and the image's name (the same LR on every call)."
)


def degrade_option(config: str | None, lr: Path | None):
    """--degrade CONFIG -> (its data.realesrgan, its train.seed), or None without one; SrganError
    with --lr, or for a config whose data.degradation is not realesrgan."""
    if config is None:
        return None
    # the config loader (yaml) loads here, not at start-up: srgan --help stays fast
    from srgan.configs import load_config

    if lr is not None:
        raise SrganError(f"--degrade {config} with --lr {lr}: the LR images are given, there is nothing to degrade")

    resolved = load_config(config)
    if resolved.data.degradation != "realesrgan":
        raise SrganError(
            f"--degrade {config}: data.degradation is {resolved.data.degradation}; expected a config with "
            "data.degradation realesrgan (e.g. realesrgan_demo)"
        )
    return resolved.data.realesrgan, resolved.train.seed


def compare(
    checkpoint: Annotated[Path, typer.Argument(help=CHECKPOINT_HELP)],
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
    lr: Annotated[
        Path | None,
        typer.Option(
            "--lr", help="The photo's LR image (or a folder holding one of the same name), instead of bicubic's."
        ),
    ] = None,
    degrade: Annotated[str | None, typer.Option("--degrade", help=DEGRADE_HELP)] = None,
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
    metrics: Annotated[str, typer.Option("--metrics", help=METRICS_HELP)] = "psnr",
    blend: Annotated[
        Path | None,
        typer.Option(
            "--blend",
            help="A second generator of the checkpoint's architecture and shape: the SR panel becomes a strip, "
            "the two blended at each of --alphas (docs/interpolate.md).",
        ),
    ] = None,
    alphas: Annotated[
        str | None,
        typer.Option(
            "--alphas", help="With --blend: comma-separated, 0 (the checkpoint) to 1 (the --blend); default 0,0.5,1."
        ),
    ] = None,
) -> None:
    """Write bicubic | SR | original side by side for one photo, each panel with its scores (with --blend:
    bicubic | SR at each alpha | original)."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.inference.compare import compare_picture
    from srgan.metrics import CONVENTION, ImageScores, parse_metric_names

    if output.suffix.lower() != ".png":
        raise SrganError(f"-o {output}: expected a file name ending in .png")
    names = parse_metric_names(metrics, "--metrics")
    if blend is None and alphas is not None:
        raise SrganError("--alphas: applies with --blend only (the generator to blend with)")
    strip = None if blend is None else alphas_option(alphas or "0,0.5,1")
    check_output(output, force, inputs=(image,))  # before loading anything
    degradation = degrade_option(degrade, lr)
    runtime = runtime_from_options(device, precision)
    scores = ImageScores(names, runtime.device, "--metrics")  # a missing weight file stops here, before the work
    generator, model, runtime = generator_from_option(checkpoint, runtime)
    other = None
    if blend is not None:
        from srgan.models.checkpoint import load_described_generator

        other, blended = load_described_generator(blend)
        other = runtime.place(other)
        model = f"{model}; blended with {blended}"
    result = compare_picture(
        generator,
        runtime,
        image,
        output,
        force,
        scores,
        model=model,
        lr_path=lr,
        degrade=degradation,
        blend=None if other is None or strip is None else (other, strip),
    )
    panels = [key for key in result if key != "bicubic"]
    shown = []
    for name in names:
        values = [f"{'SR' if key == 'sr' else key} " + number(name, result[key][name]) for key in panels]
        shown.append(f"{name.upper().replace('_', '-')} bicubic {number(name, result['bicubic'][name])}, ")
        shown[-1] += ", ".join(values)
        if name != "psnr":
            warning = scores.learned[name].warning if name in scores.learned else None
            if warning:
                shown[-1] += f" (WARNING {warning})"
    convention = f" ({CONVENTION.format(scale=generator.scale)})" if {"psnr", "ssim"} & set(names) else ""
    source = "given" if lr is not None else "bicubic" if degrade is None else degrade
    middle = "SR" if blend is None else " | ".join(panels)
    typer.echo(f"{output}: bicubic | {middle} | original; LR by {source}; {'; '.join(shown)}{convention}")


def number(metric: str, value: float) -> str:
    return f"{value:.2f} dB" if metric == "psnr" else f"{value:.4f}"


def alphas_option(value: str) -> tuple[float, ...]:
    """--alphas "0,0.5,1" -> (0.0, 0.5, 1.0); SrganError for anything but numbers in [0, 1], repeated none."""
    from srgan.models.interpolate import check_alpha

    try:
        alphas = tuple(float(part) for part in value.split(","))
    except ValueError:
        raise SrganError(f"--alphas: expected comma-separated numbers from 0 to 1, got {value!r}") from None
    for alpha in alphas:
        check_alpha(alpha, "--alphas")
    if len(set(alphas)) != len(alphas):
        raise SrganError(f"--alphas: {value!r} repeats an alpha")
    return alphas


def evaluate(
    folders: Annotated[
        list[Path], typer.Argument(help="Folders of high-resolution images (e.g. Set5, Set14), or image files.")
    ],
    checkpoint: Annotated[Path, typer.Option("--checkpoint", "-k", help=CHECKPOINT_HELP)],
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the scores to this JSON file.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --json file.")] = False,
    lr: Annotated[
        Path | None,
        typer.Option(
            "--lr",
            help="A folder of LR inputs matched to the HR folder's images by relative path less extension "
            "(a.png <-> a.jpg), instead of bicubic downscales (docs/paired.md).",
        ),
    ] = None,
    degrade: Annotated[str | None, typer.Option("--degrade", help=DEGRADE_HELP)] = None,
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP + " Default fp32: figures to quote.")] = "fp32",
    metrics: Annotated[str, typer.Option("--metrics", help=METRICS_HELP)] = "psnr,ssim",
    blend: Annotated[Path | None, typer.Option("--blend", help=BLEND_HELP)] = None,
    blend_alpha: Annotated[float | None, typer.Option("--blend-alpha", help=BLEND_ALPHA_HELP)] = None,
) -> None:
    """PSNR/SSIM (and LPIPS, DISTS) of SR and of bicubic per image and on average, as the literature computes them."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.inference.evaluate import evaluate_folders, format_table
    from srgan.metrics import ImageScores, parse_metric_names

    names = parse_metric_names(metrics, "--metrics")
    if json_path is not None:
        check_output(json_path, force)  # before the work, not after it
    degradation = degrade_option(degrade, lr)
    runtime = runtime_from_options(device, precision)
    scores = ImageScores(names, runtime.device, "--metrics")  # a missing weight file stops here, before the work
    generator, model, runtime = generator_from_option(checkpoint, runtime, blend=blend, blend_alpha=blend_alpha)
    result = evaluate_folders(
        generator, runtime, folders, scores=scores, model=model, lr_folder=lr, degrade=degradation
    )
    typer.echo(format_table(result))
    if json_path is not None:
        write_text(json_path, json.dumps(result, indent=2) + "\n", overwrite=force)
    if result["failed"]:
        total = len(result["images"]) + len(result["failed"])
        typer.echo(f"srgan: {len(result['failed'])} of {total} images failed (not in the means):", err=True)
        for why in result["failed"]:
            typer.echo(f"  {why}", err=True)
        raise typer.Exit(1)
