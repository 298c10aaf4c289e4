"""PSNR and SSIM as the super-resolution literature reports them: on the Y
channel of BT.601 (as MATLAB's rgb2ycbcr), `scale` pixels shaved from each
border, from 8-bit images (SR rounded as when it is saved). SSIM uses an
11x11 Gaussian window, sigma 1.5, population covariances, as scikit-image's
`structural_similarity(gaussian_weights=True, use_sample_covariance=False)`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

CONVENTION = "Y channel (BT.601, MATLAB rgb2ycbcr), {scale} px border shaved, 8-bit"


# BT.601's Y of RGB in [0, 1], MATLAB rgb2ycbcr's row, in [16, 235]: Y = 16 + Y_WEIGHTS . RGB
# (losses/colour.py's YCbCr shares it)
Y_WEIGHTS = (65.481, 128.553, 24.966)


def rgb8_to_y(image: torch.Tensor) -> torch.Tensor:
    """3xHxW uint8 (or float in 0..255) -> HxW float64 Y in [16, 235]."""
    r, g, b = image.double().unbind(0)
    wr, wg, wb = Y_WEIGHTS
    return 16.0 + (wr * r + wg * g + wb * b) / 255.0


def quantize(image: torch.Tensor) -> torch.Tensor:
    """3xHxW float in [0, 1] -> uint8, rounded as when written to a PNG."""
    return image.float().clamp(0, 1).mul(255).round().to(torch.uint8)


def shave(y: torch.Tensor, border: int) -> torch.Tensor:
    return y[border:-border, border:-border] if border > 0 else y


def psnr_y(sr8: torch.Tensor, hr8: torch.Tensor, border: int) -> float:
    """PSNR in dB of two 3xHxW uint8 images on Y, borders shaved."""
    a, b = shave(rgb8_to_y(sr8), border), shave(rgb8_to_y(hr8), border)
    mse = torch.mean((a - b) ** 2).item()
    return float("inf") if mse == 0 else 10 * math.log10(255.0**2 / mse)


def gaussian_window(size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """The size x size Gaussian of `sigma`, summing to 1, in float64: SSIM's
    window here and MS-SSIM's in losses/ms_ssim.py."""
    x = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    return g[:, None] * g[None, :]


def ssim_y(sr8: torch.Tensor, hr8: torch.Tensor, border: int) -> float:
    """SSIM of two 3xHxW uint8 images on Y, borders shaved (data range 255)."""
    a = shave(rgb8_to_y(sr8), border)[None, None]
    b = shave(rgb8_to_y(hr8), border)[None, None]
    window = gaussian_window()[None, None].to(a.device)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    # 'valid' filtering: the same values scikit-image keeps after cropping
    # the (window - 1) / 2 pixels its filter padded.
    mu_a, mu_b = F.conv2d(a, window), F.conv2d(b, window)
    var_a = F.conv2d(a * a, window) - mu_a**2
    var_b = F.conv2d(b * b, window) - mu_b**2
    cov = F.conv2d(a * b, window) - mu_a * mu_b
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return ssim_map.mean().item()
