"""MS-SSIM + L1 (Zhao et al. 2017, "Loss Functions for Image Restoration
with Neural Networks"): alpha (1 - MS-SSIM) + (1 - alpha) L1, alpha 0.84 in
the paper. MS-SSIM is Wang, Simoncelli and Bovik's (2003): an 11x11
Gaussian window of sigma 1.5, K1 0.01, K2 0.03, data range 1, the contrast-
structure term at each scale but the last and the whole SSIM at the last,
2x2 average pooling between scales, weights (0.0448, 0.2856, 0.3001,
0.2363, 0.1333).

The L1 here is the plain mean absolute error, not the paper's Gaussian-
weighted one: over a whole crop the two differ only in how they weigh the
pixels near its centre, and the plain one needs no window of its own.

Training crops (32 to 96 px) are too small for five scales: each scale's
valid filtering needs at least 11 px, so 5 scales need 176 px. A smaller
image takes the first scales that fit (32 px: 2, 64 px: 3, 96 px: 4) and
their weights renormalised to sum to 1; below 11 px there is no scale and
the config check refuses the crop."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from srgan.losses.colour import rgb_to_ycbcr
from srgan.metrics.psnr_ssim import gaussian_window

WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
WINDOW = 11
SIGMA = 1.5
K1, K2 = 0.01, 0.03
FLOOR = 1e-6  # each scale's term is kept above 0: a fractional power of 0 has no finite gradient


def scales_for(size: int) -> int:
    """How many scales an image of `size` px (its smaller side) takes: the
    most, up to 5, whose coarsest still holds one WINDOW; 0 if none does."""
    n = 0
    while n < len(WEIGHTS) and size // 2**n >= WINDOW:
        n += 1
    return n


def depthwise_window(channels: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The WINDOW x WINDOW Gaussian (sum 1) as a depthwise conv weight, channels x 1 x WINDOW x WINDOW."""
    window = gaussian_window(WINDOW, SIGMA).to(device=device, dtype=dtype)
    return window.expand(channels, 1, WINDOW, WINDOW).contiguous()


def ssim_terms(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NxCxHxW -> (SSIM, contrast-structure), each the mean over the valid
    positions, per image and channel (NxC); population (co)variances."""
    window = depthwise_window(a.shape[1], a.dtype, a.device)

    def blur(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, window, groups=a.shape[1])

    c1, c2 = K1**2, K2**2
    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    cs = (2 * cov + c2) / (var_a + var_b + c2)
    ssim = (2 * mu_a * mu_b + c1) / (mu_a**2 + mu_b**2 + c1) * cs
    return ssim.mean(dim=(-2, -1)), cs.mean(dim=(-2, -1))


def ms_ssim(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """NxCxHxW in [0, 1] -> MS-SSIM per image and channel (NxC), over the
    scales scales_for(min(H, W)) gives, their weights renormalised. Raises
    ValueError for an image smaller than one window (the config check
    refuses such crops first)."""
    n = scales_for(min(a.shape[-2:]))
    if n == 0:
        raise ValueError(f"MS-SSIM needs images of at least {WINDOW} px, got {tuple(a.shape[-2:])}")
    total = sum(WEIGHTS[:n])
    result = torch.ones(a.shape[:2], dtype=a.dtype, device=a.device)
    for i in range(n):
        ssim, cs = ssim_terms(a, b)
        term = ssim if i == n - 1 else cs
        result = result * term.clamp_min(FLOOR).pow(WEIGHTS[i] / total)
        if i < n - 1:
            a, b = F.avg_pool2d(a, 2), F.avg_pool2d(b, 2)
    return result


def ms_ssim_l1_loss(sr: torch.Tensor, hr: torch.Tensor, alpha: float = 0.84, channel: str = "rgb") -> torch.Tensor:
    """alpha (1 - MS-SSIM) + (1 - alpha) L1 of SR against HR, both on the
    RGB channels (MS-SSIM their mean) or on Y (BT.601, losses/colour.py)."""
    sr, hr = sr.float(), hr.float()
    if channel == "y":
        sr, hr = rgb_to_ycbcr(sr)[:, :1], rgb_to_ycbcr(hr)[:, :1]
    return alpha * (1 - ms_ssim(sr, hr).mean()) + (1 - alpha) * F.l1_loss(sr, hr)
