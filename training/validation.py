"""Validation during training: train.val_metrics (PSNR/SSIM in the
literature's convention, LPIPS, DISTS, the CIEDE2000 colour drift), one image at a time (memory stays
flat whatever the size of the set)."""

from __future__ import annotations

import logging

import numpy as np
import torch
from PIL import Image

from srgan.configs.schema import RealEsrganDegradation
from srgan.data import FolderImages, PreparedImages, ValImages
from srgan.data.paired import PairedImages, validation_images
from srgan.files.errors import SrganError
from srgan.inference.upscale import inference_network, upscale_pixels
from srgan.metrics import ImageScores, quantize
from srgan.models import Runtime, SRGenerator

log = logging.getLogger("srgan")


def bicubic_upscale(lr: torch.Tensor, scale: int) -> torch.Tensor:
    """3xhxw float in [0, 1] (exactly 8-bit values) -> 3x(sh)x(sw) uint8 by PIL's bicubic."""
    image = Image.fromarray(quantize(lr).permute(1, 2, 0).numpy())
    width, height = image.size
    up = image.resize((width * scale, height * scale), Image.Resampling.BICUBIC)
    return torch.from_numpy(np.array(up)).permute(2, 0, 1)


def checked_validation_set(
    images: FolderImages | PreparedImages | PairedImages,
    scale: int,
    max_size: int,
    scores: ImageScores,
    degradation: RealEsrganDegradation | None = None,
    seed: int = 0,
) -> tuple[ValImages, dict[str, float]]:
    """The validation images that decode, and the mean scores of bicubic
    upscaling on them (of the given LR images with paired data, of the
    degraded ones with a `degradation`): the figures to beat. It decodes
    every image once, before training, so that a file broken past its header
    is skipped with a warning now rather than failing the first validation
    hours later. Raises SrganError when no image decodes."""
    every = validation_images(images, scale, max_size, degradation, seed)
    usable: list[int] = []
    sums = dict.fromkeys(scores.columns, 0.0)
    for i in range(len(every)):
        try:
            _, lr, hr = every[i]
        except SrganError as error:
            log.warning("skipping %s", error)
            continue
        for name, value in scores(bicubic_upscale(lr, scale), quantize(hr), scale).items():
            sums[name] += value
        usable.append(i)
    if not usable:
        raise SrganError(f"data.val: none of the {len(images)} images can be decoded")
    means = {name: total / len(usable) for name, total in sums.items()}
    return validation_images(images.select(usable), scale, max_size, degradation, seed), means


def validate(
    generator: SRGenerator, images: ValImages, runtime: Runtime, scores: ImageScores, indices: range | None = None
) -> tuple[list[float], int]:
    """Sums of each of `scores`' columns (in its order) of the generator's
    output (rounded to 8 bits) over the images at `indices` (default: all),
    and their count; tiled as `srgan upscale` is, so a large image costs no
    more memory. Sums, so that ranks that score shares of the set add up to
    the whole set's mean."""
    network = inference_network(generator, runtime)  # an eval-mode copy: training is untouched
    sums, count = [0.0] * len(scores.columns), 0
    for i in range(len(images)) if indices is None else indices:
        _, lr, hr = images[i]
        lr8 = quantize(lr).permute(1, 2, 0).numpy()
        sr8, hr8 = torch.from_numpy(upscale_pixels(network, lr8, runtime)).permute(2, 0, 1), quantize(hr)
        for j, value in enumerate(scores(sr8, hr8, images.scale).values()):
            sums[j] += value
        count += 1
    return sums, count
