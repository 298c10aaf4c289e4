"""Unsharp-masked targets: Real-ESRGAN (Wang et al. 2021) trains its L1,
perceptual and GAN terms against a sharpened HR (`l1_gt_usm`, `percep_gt_usm`,
`gan_gt_usm`), so that the model learns crisper edges than its often soft
ground truth has. The mask is BasicSR's USMSharp with Real-ESRGAN's settings:

    blur  = G * hr                    G: 51 x 51 Gaussian, sigma 8 (OpenCV's
                                      getGaussianKernel(51, 0)), reflected borders
    sharp = clip(hr + 0.5 (hr - blur), 0, 1)
    mask  = G * [|hr - blur| * 255 > 10]    (a soft mask: edges, not flat noise)
    out   = mask * sharp + (1 - mask) * hr

The 2-D Gaussian is separable: it runs as a row then a column filter (102
taps a pixel rather than 2601), the same function up to float rounding."""

from __future__ import annotations

import torch
import torch.nn.functional as F

USM_SIZE = 51  # Real-ESRGAN's radius 50, made odd as BasicSR does
USM_SIGMA = 0.3 * ((USM_SIZE - 1) * 0.5 - 1) + 0.8  # OpenCV's sigma for sigma <= 0: 8.0 at 51 taps
USM_WEIGHT = 0.5
USM_THRESHOLD = 10  # on the 0..255 scale


def gaussian_taps(size: int = USM_SIZE, sigma: float = USM_SIGMA) -> torch.Tensor:
    """The normalised 1-D Gaussian of `size` taps (float64)."""
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def gaussian_blur(images: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """NxCxHxW blurred channel by channel by the separable kernel taps x taps,
    borders reflected (sides must exceed len(taps) // 2)."""
    channels, half = images.shape[1], taps.numel() // 2
    padded = F.pad(images, (half, half, half, half), mode="reflect")
    # depthwise (groups = channels): faster on the CPU than the channels as a batch of 1-channel images
    # (docs/paired.md)
    rows = F.conv2d(padded, taps.view(1, 1, 1, -1).expand(channels, 1, 1, -1), groups=channels)
    return F.conv2d(rows, taps.view(1, 1, -1, 1).expand(channels, 1, -1, 1), groups=channels)


@torch.no_grad()
def unsharp_mask(hr: torch.Tensor) -> torch.Tensor:
    """NxCxHxW float in [0, 1] -> the sharpened targets (see the module's docstring), without gradient."""
    images = hr.float()
    taps = gaussian_taps().to(device=images.device, dtype=torch.float32)
    residual = images - gaussian_blur(images, taps)
    mask = gaussian_blur((residual.abs() * 255 > USM_THRESHOLD).float(), taps)
    sharp = (images + USM_WEIGHT * residual).clamp(0, 1)
    return (mask * sharp + (1 - mask) * images).to(hr.dtype)
