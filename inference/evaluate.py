"""`srgan evaluate`: PSNR/SSIM (and LPIPS, DISTS, CIEDE2000 when asked) of SR and of
bicubic on folders of HR images (or single ones), in the literature's
convention (the HR cropped to a multiple of the scale, its LR made by bicubic
downscaling; PSNR/SSIM on Y with `scale` px shaved, the learned ones on RGB)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srgan.configs.schema import RealEsrganDegradation
from srgan.data import find_images, load_rgb8
from srgan.data.images import IMAGE_EXTENSIONS
from srgan.data.pairing import folder_pairs
from srgan.files.errors import SrganError, first_line
from srgan.files.inputs import note_read
from srgan.files.reading import not_found
from srgan.inference.compare import bicubic_upscale, model_input, scored_hr
from srgan.inference.tiles import OutOfMemoryAtFloor
from srgan.inference.upscale import inference_network, upscale_pixels
from srgan.metrics import CONVENTION, LOWER_IS_BETTER, ImageScores
from srgan.models import Runtime, SRGenerator

log = logging.getLogger("srgan")


def _chw(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


def _means(images: list[dict]) -> dict:
    mean: dict[str, Any] = {
        kind: {metric: float(np.mean([im[kind][metric] for im in images])) for metric in images[0][kind]}
        for kind in ("sr", "bicubic")
    }
    if "psnr" in mean["sr"]:
        mean["gain_psnr"] = mean["sr"]["psnr"] - mean["bicubic"]["psnr"]
    return mean


def evaluate_folders(
    generator: SRGenerator,
    runtime: Runtime,
    folders: list[Path],
    metrics: Sequence[str] = ("psnr", "ssim"),
    scores: ImageScores | None = None,
    model: str = "",
    lr_folder: Path | None = None,
    degrade: tuple[RealEsrganDegradation, int] | None = None,
) -> dict:
    """Return the scores per image and their means, overall and (for several
    folders) per folder, as the literature reports Set5 and Set14 apart; one
    image is in memory at a time. An image file among `folders` is scored alone
    (it counts in the overall mean and has no folder mean). `scores`: the
    metrics already loaded (the CLI loads them before the generator). `model`,
    what the checkpoint was recognised as, is logged once the folders pass their checks.
    The LR inputs (of SR and of bicubic) are bicubic downscales of the HR, or:
    `lr_folder`'s images, matched to the one HR folder's by relative path less
    extension (srgan.data.paired); or with `degrade` (settings, seed), the HR
    degraded by them from a generator fixed by the seed and the image's name
    (the same LR on every call). Raises SrganError for a missing path, an
    empty folder, a file that is not an image, `lr_folder` with other than
    one HR folder, and when no image can be scored; an image that does not
    decode is skipped and listed under "failed"."""
    scale = generator.scale
    scores = scores or ImageScores(metrics, runtime.device, "--metrics")
    partners = _lr_partners(folders, lr_folder) if lr_folder is not None else {}
    paths: list[tuple[int, Path]] = []  # (index of its folder, image)
    for index, folder in enumerate(folders):
        if folder.is_dir():
            found = find_images(folder)
            if not found:
                raise SrganError(f"{folder}: no images in it")
        elif folder.is_file():
            if folder.suffix.lower() not in IMAGE_EXTENSIONS:
                raise SrganError(
                    f"{folder}: not an image (expected a folder of images or an image file: "
                    f"{', '.join(e.lstrip('.') for e in IMAGE_EXTENSIONS)})"
                )
            note_read(folder, "an image")
            found = [folder]
        else:
            raise not_found(folder, "file or folder")
        paths += [(index, path) for path in found if lr_folder is None or path in partners]
    if model:
        log.info("model: %s", model)
    network = inference_network(generator, runtime)
    images: list[dict[str, Any]] = []
    failed, folder_of = [], []
    for index, path in paths:
        lr_path = partners.get(path)
        try:
            hr = load_rgb8(path)
            given_lr = load_rgb8(lr_path) if lr_path is not None else None
        except Exception as error:  # PIL raises many types for a broken file
            which = path if lr_path is None else f"{path} / {lr_path}"
            reason = (
                str(error) if isinstance(error, SrganError) else f"{which}: cannot be decoded ({first_line(error)})"
            )
            log.warning("%s; skipped", reason)
            failed.append(reason)
            continue
        fitted = scored_hr(hr, given_lr, scale, path, lr_path)
        if fitted is None:  # a pair whose sizes disagree: warned, skipped
            continue
        hr = fitted
        if min(hr.shape[:2]) < 2 * scale + 11:
            log.warning("skipping %s: too small to score at x%d", path, scale)
            continue
        name = path.stem if len(folders) == 1 else f"{path.parent.name}/{path.stem}"
        lr = model_input(hr, given_lr, scale, degrade, name)
        try:
            sr = _chw(upscale_pixels(network, lr, runtime))
        except OutOfMemoryAtFloor as error:  # the tiler does not know the file's name
            raise SrganError(f"{path}: {error}") from None
        bicubic, hr8 = _chw(bicubic_upscale(lr, scale)), _chw(hr)
        images.append(
            {
                "name": name,
                "sr": scores(sr, hr8, scale),
                "bicubic": scores(bicubic, hr8, scale),
            }
        )
        if "psnr" in scores.names:
            images[-1]["gain_psnr"] = images[-1]["sr"]["psnr"] - images[-1]["bicubic"]["psnr"]
        folder_of.append(index)
    if not images:
        what = "image" if lr_folder is None else f"pair (with --lr {lr_folder}) whose sizes agree with x{scale},"
        raise SrganError(
            f"{', '.join(str(f) for f in folders)}: no {what} that decodes and is large enough to evaluate"
        )
    warnings = list(scores.warnings)
    for name in scores.learned:
        undefined = sum(not np.isfinite(im[kind][name]) for im in images for kind in ("sr", "bicubic"))
        if undefined:
            warnings.append(f"{name}: NaN or infinite for {undefined} of {2 * len(images)} scores (SR and bicubic)")
            log.warning("%s", warnings[-1])
    per_folder = []
    if len(folders) > 1:
        for index, folder in enumerate(folders):
            scored = [im for im, i in zip(images, folder_of, strict=True) if i == index]
            if scored and folder.is_dir():
                per_folder.append(
                    {"folder": str(folder), "name": folder.name or str(folder), "images": len(scored), **_means(scored)}
                )
    return {
        "scale": scale,
        "metrics": list(scores.columns),  # ciede2000 gives four: its mean, p99 and the a*, b* shifts
        "convention": CONVENTION.format(scale=scale),
        "lr_folder": None if lr_folder is None else str(lr_folder),  # None: LR made from the HR, as "lr" says
        "lr": "given"
        if lr_folder is not None
        else "bicubic"
        if degrade is None
        else f"realesrgan degradation, seed {degrade[1]}",
        "images": images,
        "mean": _means(images),
        "folders": per_folder,
        "failed": failed,
        "learned_weights": [metric.weights.as_json(name) for name, metric in scores.learned.items()],
        "warnings": warnings,  # also on the table's first line, which names the metrics
    }


def _lr_partners(folders: list[Path], lr_folder: Path) -> dict[Path, Path]:
    """HR image -> its LR partner, for `--lr`: one folder of HR images."""
    if len(folders) != 1 or not folders[0].is_dir():
        raise SrganError(f"--lr {lr_folder}: expected one folder of HR images beside it, got {len(folders)} paths")
    return dict(folder_pairs(find_images(folders[0]), folders[0], lr_folder, str(folders[0]), "--lr"))


def format_table(result: dict) -> str:
    """Per image and on average: SR and bicubic for each metric, and SR's
    gain over bicubic in PSNR (dB; negative where the model does worse)."""
    metrics = result.get("metrics", ["psnr", "ssim"])
    folder_means = [{**f, "name": f"{f['name']} mean"} for f in result.get("folders", [])]
    width = max(12, *(len(_one_line(im["name"])) for im in [*result["images"], *folder_means]))
    header = f"{'image':<{width}}  " + " ".join(f"{'SR ' + m:>{_width(m)}}" for m in metrics)
    header += "  " + " ".join(f"{'bicubic ' + m:>{_width(m, 8)}}" for m in metrics)
    gain = "psnr" in metrics
    if gain:
        header += f"  {'gain dB':>7}"
    lower = [m for m in metrics if m in LOWER_IS_BETTER and m in _LEARNED]
    lines = [
        f"x{result['scale']}, {' / '.join(_TITLES[m] for m in metrics)}"
        + (f" on the {result['convention']}" if {"psnr", "ssim"} & set(metrics) else "")
        + (f"; {', '.join(lower)}: on RGB, the whole image, lower is better" if lower else "")
        + (
            f"; CIEDE2000: CIELAB (D65), {result['scale']} px border shaved, lower is better; "
            "shift_a/b: SR - HR (a* + red, - green; b* + yellow, - blue)"
            if "ciede2000" in metrics
            else ""
        )
        + (
            f"; LR inputs from {_one_line(result['lr_folder'])}"
            if result.get("lr_folder")
            else f"; LR: {result.get('lr', 'bicubic')}"
        )
        + "".join(f"; WARNING {_one_line(warning)}" for warning in result.get("warnings", ())),
        header,
    ]
    rows = [*result["images"], None, *folder_means, {"name": "mean", **result["mean"]}]
    for im in rows:
        if im is None:
            lines.append("-" * len(lines[1]))
            continue
        line = f"{_one_line(im['name']):<{width}}  " + " ".join(_cell(im["sr"][m], m, _width(m)) for m in metrics)
        line += "  " + " ".join(_cell(im["bicubic"][m], m, _width(m, 8)) for m in metrics)
        if gain:
            line += f"  {im['gain_psnr']:+7.2f}"
        lines.append(line)
    if gain:
        worst = min(result["images"], key=lambda im: im["gain_psnr"])
        lines.append(f"worst gain: {_one_line(worst['name'])} {worst['gain_psnr']:+.2f} dB")
    return "\n".join(lines)


_TITLES = {
    "psnr": "PSNR (dB)",
    "ssim": "SSIM",
    "lpips": "LPIPS",
    "lpips_vgg": "LPIPS-VGG",
    "dists": "DISTS",
    "ciede2000": "CIEDE2000 mean",
    "ciede2000_p99": "p99",
    "shift_a": "a* shift",
    "shift_b": "b* shift",
}
_FORMATS = {
    "psnr": ".2f",
    "ssim": ".4f",
    "lpips": ".4f",
    "lpips_vgg": ".4f",
    "dists": ".4f",
    "ciede2000": ".3f",
    "ciede2000_p99": ".3f",
    "shift_a": "+.3f",
    "shift_b": "+.3f",
}
_LEARNED = ("lpips", "lpips_vgg", "dists")


def _cell(value: float, metric: str, width: int) -> str:
    """A score right-aligned in its column, signed where the sign is the point (the a*/b* shifts)."""
    fmt = _FORMATS[metric]
    return format(value, f"+{width}{fmt[1:]}" if fmt.startswith("+") else f"{width}{fmt}")


def _width(metric: str, prefix: int = 3) -> int:
    """A column wide enough for its header ('SR lpips', 'bicubic psnr') and its numbers."""
    return max(8, prefix + len(metric))


def _one_line(name: str) -> str:
    """A file name as one row of the table: a newline or another control
    character in it is shown escaped, as Python writes it (\\n)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
