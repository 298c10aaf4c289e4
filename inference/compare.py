"""A side-by-side picture, bicubic | SR | original, of an HR photo whose LR
version is made here: the quickest look at what a model does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw

from srgan.configs.errors import SrganError, first_line
from srgan.configs.schema import RealEsrganDegradation
from srgan.data import bicubic_downscale, load_rgb8
from srgan.data.datasets import low_resolution
from srgan.data.degradations import named_generator
from srgan.files import check_output
from srgan.inference.imageio import write_png
from srgan.inference.metrics import psnr_y
from srgan.inference.upscale import upscale_rgb8
from srgan.models import Runtime, SRGenerator

GAP = 8  # white pixels between the panels


def mod_crop(image: np.ndarray, scale: int) -> np.ndarray:
    """Drop the last rows and columns so both sides are multiples of `scale`."""
    height, width = image.shape[:2]
    return image[: height - height % scale, : width - width % scale]


def bicubic_upscale(lr: np.ndarray, scale: int) -> np.ndarray:
    height, width = lr.shape[:2]
    return np.asarray(Image.fromarray(lr).resize((width * scale, height * scale), Image.Resampling.BICUBIC))


def side_by_side(panels: list[np.ndarray]) -> np.ndarray:
    height = panels[0].shape[0]
    gap = np.full((height, GAP, 3), 255, dtype=np.uint8)
    row: list[np.ndarray] = []
    for panel in panels:
        row += [panel, gap]
    return np.concatenate(row[:-1], axis=1)


def degraded_lr(hr: np.ndarray, scale: int, degrade: tuple[RealEsrganDegradation, int] | None, name: str) -> np.ndarray:
    """The HxWx3 uint8 LR of an HR image: bicubic, or degraded by (settings,
    seed) from a generator fixed by the seed and `name`."""
    if degrade is None:
        return bicubic_downscale(hr, scale)
    settings, seed = degrade
    lr = low_resolution(hr, scale, settings, named_generator(seed, name))
    return (lr * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


def compare_picture(
    generator: SRGenerator,
    runtime: Runtime,
    image_path: Path,
    out_path: Path,
    force: bool = False,
    degrade: tuple[RealEsrganDegradation, int] | None = None,
) -> dict[str, float]:
    """Write bicubic | SR | original for one HR photo; returns their Y-channel
    PSNRs. `degrade` (settings, seed): the LR degraded as `srgan evaluate
    --degrade` degrades it, instead of bicubic."""
    check_output(out_path, force, inputs=(image_path,))  # before the work
    try:
        hr = mod_crop(load_rgb8(image_path), generator.scale)
    except SrganError:
        raise
    except Exception as error:
        raise SrganError(f"{image_path}: cannot be decoded as an image ({first_line(error)})") from None
    if min(hr.shape[:2]) < 4 * generator.scale:
        raise SrganError(f"{image_path}: too small to compare at x{generator.scale}")
    generator.eval()
    lr = degraded_lr(hr, generator.scale, degrade, image_path.stem)
    bicubic = bicubic_upscale(lr, generator.scale)
    sr = upscale_rgb8(generator, lr, runtime)

    def chw(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(a)).permute(2, 0, 1)

    border = generator.scale
    scores = {"bicubic_psnr": psnr_y(chw(bicubic), chw(hr), border), "sr_psnr": psnr_y(chw(sr), chw(hr), border)}
    panels = [
        labelled(bicubic, f"bicubic {scores['bicubic_psnr']:.2f} dB"),
        labelled(sr, f"SR {scores['sr_psnr']:.2f} dB"),
        labelled(hr, "original"),
    ]
    write_png(side_by_side(panels), out_path, overwrite=force, inputs=(image_path,))
    return scores


def labelled(panel: np.ndarray, label: str) -> np.ndarray:
    """`panel` with `label` in white on a dark box in its top-left corner
    (the scores are computed before, on the unlabelled pixels)."""
    image = Image.fromarray(panel)
    draw = ImageDraw.Draw(image)
    size = max(10, min(panel.shape[:2]) // 16)
    left, top, right, bottom = draw.textbbox((0, 0), label, font_size=size)
    pad = max(2, size // 4)
    draw.rectangle((0, 0, right + 2 * pad, bottom + 2 * pad), fill=(0, 0, 0))
    draw.text((pad, pad), label, fill=(255, 255, 255), font_size=size)
    return np.asarray(image)
