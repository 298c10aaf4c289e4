"""`srgan evaluate`: PSNR/SSIM of SR and of bicubic on folders of HR images (or single ones),
in the literature's convention (the HR cropped to a multiple of the scale,
its LR made by bicubic downscaling, Y channel, `scale` px shaved)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srgan.configs.errors import SrganError, first_line
from srgan.configs.schema import RealEsrganDegradation
from srgan.data import find_images, load_rgb8
from srgan.data.images import IMAGE_EXTENSIONS
from srgan.inference.compare import bicubic_upscale, degraded_lr, mod_crop
from srgan.inference.metrics import CONVENTION, psnr_y, ssim_y
from srgan.inference.upscale import inference_network, upscale_pixels
from srgan.models import Runtime, SRGenerator

log = logging.getLogger("srgan")


def _chw(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


def _means(images: list[dict]) -> dict:
    mean: dict[str, Any] = {
        kind: {metric: float(np.mean([im[kind][metric] for im in images])) for metric in ("psnr", "ssim")}
        for kind in ("sr", "bicubic")
    }
    mean["gain_psnr"] = mean["sr"]["psnr"] - mean["bicubic"]["psnr"]
    return mean


def evaluate_folders(
    generator: SRGenerator,
    runtime: Runtime,
    folders: list[Path],
    degrade: tuple[RealEsrganDegradation, int] | None = None,
) -> dict:
    """Scores per image and their means, overall and (for several folders)
    per folder, as the literature reports Set5 and Set14 apart; one image
    in memory at a time. An image file among `folders` is scored alone
    (it counts in the overall mean and has no folder mean). `degrade`
    (settings, seed): each LR is degraded by them instead of bicubic, from
    a generator fixed by the seed and the image's name (the same LR on
    every call)."""
    scale = generator.scale
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
            found = [folder]
        else:
            raise SrganError(f"{folder}: no such file or folder")
        paths += [(index, path) for path in found]
    network = inference_network(generator, runtime)
    images: list[dict[str, Any]] = []
    failed, folder_of = [], []
    for index, path in paths:
        try:
            hr = mod_crop(load_rgb8(path), scale)
        except Exception as error:  # PIL raises many types for a broken file
            reason = str(error) if isinstance(error, SrganError) else f"{path}: cannot be decoded ({first_line(error)})"
            log.warning("%s; skipped", reason)
            failed.append(reason)
            continue
        if min(hr.shape[:2]) < 2 * scale + 11:
            log.warning("skipping %s: too small to score at x%d", path, scale)
            continue
        name = path.stem if len(folders) == 1 else f"{path.parent.name}/{path.stem}"
        lr = degraded_lr(hr, scale, degrade, name)
        sr, bicubic, hr8 = _chw(upscale_pixels(network, lr, runtime)), _chw(bicubic_upscale(lr, scale)), _chw(hr)
        images.append(
            {
                "name": name,
                "sr": {"psnr": psnr_y(sr, hr8, scale), "ssim": ssim_y(sr, hr8, scale)},
                "bicubic": {"psnr": psnr_y(bicubic, hr8, scale), "ssim": ssim_y(bicubic, hr8, scale)},
            }
        )
        images[-1]["gain_psnr"] = images[-1]["sr"]["psnr"] - images[-1]["bicubic"]["psnr"]
        folder_of.append(index)
    if not images:
        raise SrganError(f"{', '.join(str(f) for f in folders)}: no image that decodes and is large enough to evaluate")
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
        "convention": CONVENTION.format(scale=scale),
        "lr": "bicubic" if degrade is None else f"realesrgan degradation, seed {degrade[1]}",
        "images": images,
        "mean": _means(images),
        "folders": per_folder,
        "failed": failed,
    }


def format_table(result: dict) -> str:
    """Per image and on average: SR and bicubic, and SR's gain over bicubic
    in PSNR (dB; negative where the model does worse than bicubic)."""
    folder_means = [{**f, "name": f"{f['name']} mean"} for f in result.get("folders", [])]
    width = max(12, *(len(_one_line(im["name"])) for im in [*result["images"], *folder_means]))
    lines = [
        f"x{result['scale']}, PSNR (dB) / SSIM on the {result['convention']}; LR: {result.get('lr', 'bicubic')}",
        f"{'image':<{width}}  {'SR psnr':>8} {'SR ssim':>8}  {'bicubic psnr':>12} {'bicubic ssim':>12}  {'gain dB':>7}",
    ]
    rows = [*result["images"], None, *folder_means, {"name": "mean", **result["mean"]}]
    for im in rows:
        if im is None:
            lines.append("-" * len(lines[1]))
            continue
        lines.append(
            f"{_one_line(im['name']):<{width}}  {im['sr']['psnr']:8.2f} {im['sr']['ssim']:8.4f}  "
            f"{im['bicubic']['psnr']:12.2f} {im['bicubic']['ssim']:12.4f}  "
            f"{im['gain_psnr']:+7.2f}"
        )
    worst = min(result["images"], key=lambda im: im["gain_psnr"])
    lines.append(f"worst gain: {_one_line(worst['name'])} {worst['gain_psnr']:+.2f} dB")
    return "\n".join(lines)


def _one_line(name: str) -> str:
    """A file name as one row of the table: a newline or another control
    character in it is shown escaped, as Python writes it (\\n)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)
