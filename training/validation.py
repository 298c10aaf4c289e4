"""Validation during training: PSNR/SSIM in the literature's convention,
one image at a time (memory stays flat whatever the size of the set)."""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from srgan.data import ValImages
from srgan.inference.metrics import psnr_y, quantize, ssim_y
from srgan.inference.upscale import inference_network, upscale_pixels
from srgan.models import Runtime


def bicubic_upscale(lr: torch.Tensor, scale: int) -> torch.Tensor:
    """3xhxw float in [0, 1] (exactly 8-bit values) -> 3x(sh)x(sw) uint8 by PIL's bicubic."""
    image = Image.fromarray(quantize(lr).permute(1, 2, 0).numpy())
    width, height = image.size
    up = image.resize((width * scale, height * scale), Image.BICUBIC)
    return torch.from_numpy(np.array(up)).permute(2, 0, 1)


def bicubic_scores(images: ValImages) -> tuple[float, float]:
    """Mean PSNR/SSIM of bicubic upscaling on the set: the figure to beat."""
    psnrs, ssims = [], []
    for _, lr, hr in images:
        up, hr8 = bicubic_upscale(lr, images.scale), quantize(hr)
        psnrs.append(psnr_y(up, hr8, images.scale))
        ssims.append(ssim_y(up, hr8, images.scale))
    return float(np.mean(psnrs)), float(np.mean(ssims))


def validate(generator: torch.nn.Module, images: ValImages, runtime: Runtime) -> tuple[float, float]:
    """Mean PSNR/SSIM of the generator's output (rounded to 8 bits) on the set;
    tiled as `srgan upscale` is, so a large image costs no more memory."""
    network = inference_network(generator, runtime)  # an eval-mode copy: training is untouched
    psnrs, ssims = [], []
    for _, lr, hr in images:
        lr8 = quantize(lr).permute(1, 2, 0).numpy()
        sr8, hr8 = torch.from_numpy(upscale_pixels(network, lr8, runtime)).permute(2, 0, 1), quantize(hr)
        psnrs.append(psnr_y(sr8, hr8, images.scale))
        ssims.append(ssim_y(sr8, hr8, images.scale))
    return float(np.mean(psnrs)), float(np.mean(ssims))
