"""Colour drift: how far, and which way, SR's colours moved from HR's.

sRGB -> CIELAB under D65 with the sRGB companding, as scikit-image's
`rgb2lab` computes it, and the CIEDE2000 difference (Sharma, Wu and Dalal,
"The CIEDE2000 color-difference formula: implementation notes, supplementary
test data, and mathematical observations", Color Res. Appl. 30(1), 2005),
with kL = kC = kH = 1. Everything is whole-tensor arithmetic in float64: an
image costs a few dozen element-wise passes, no Python loop over pixels.

`colour_drift` scores one SR image against its HR with the border shaved as
PSNR is: the mean CIEDE2000, its 99th percentile (of this image's pixels; a
set's figure is the mean of its images' percentiles, as PSNR's is of its
images' PSNRs), and the mean shift of a* and b* (SR - HR: a* > 0 went
towards red, < 0 towards green; b* > 0 towards yellow, < 0 towards blue)."""

from __future__ import annotations

import math

import torch

# sRGB primaries to CIE XYZ (D65), and the D65 white (2-degree observer): scikit-image's figures
XYZ_FROM_RGB = (
    (0.412453, 0.357580, 0.180423),
    (0.212671, 0.715160, 0.072169),
    (0.019334, 0.119193, 0.950227),
)
D65_WHITE = (0.95047, 1.0, 1.08883)

# the columns a `ciede2000` metric gives, in this order
DRIFT_COLUMNS = ("ciede2000", "ciede2000_p99", "shift_a", "shift_b")

_SEVEN = 25.0**7  # CIEDE2000's chroma constant, 25^7


def srgb_to_linear(c: torch.Tensor) -> torch.Tensor:
    """sRGB values in [0, 1] -> linear light (the sRGB companding undone), float64."""
    c = c.double()
    return torch.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)


def rgb_to_lab(rgb: torch.Tensor) -> torch.Tensor:
    """...x3xHxW sRGB, float in [0, 1] or uint8 -> the same shape of CIELAB
    (L* in [0, 100]), float64, D65; refuses (ValueError) a tensor whose
    channel axis is not 3."""
    if rgb.dim() < 3 or rgb.shape[-3] != 3:
        raise ValueError(f"rgb_to_lab: expected ...x3xHxW, got shape {tuple(rgb.shape)}")
    if rgb.dtype == torch.uint8:  # 256 values: a table lookup instead of a power per pixel
        table = srgb_to_linear(torch.arange(256, dtype=torch.float64, device=rgb.device) / 255)
        linear = table[rgb.long()]
    else:
        linear = srgb_to_linear(rgb)
    matrix = torch.tensor(XYZ_FROM_RGB, dtype=torch.float64, device=rgb.device)
    white = torch.tensor(D65_WHITE, dtype=torch.float64, device=rgb.device)
    xyz = torch.einsum("ij,...jhw->...ihw", matrix, linear) / white[:, None, None]
    # the cube root, with the linear toe below (6/29)^3 as CIE 1976 defines it
    f = torch.where(xyz > 0.008856, xyz.clamp_min(0.008856) ** (1 / 3), 7.787 * xyz + 16 / 116)
    fx, fy, fz = f.unbind(-3)
    return torch.stack((116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)), dim=-3)


def ciede2000(lab1: torch.Tensor, lab2: torch.Tensor) -> torch.Tensor:
    """CIEDE2000 between two ...x3x... CIELAB tensors whose axis -3 holds
    L*, a*, b* (a batch of images, or N x 3 x 1 x 1 pairs): the ... x H x W
    differences, float64, kL = kC = kH = 1."""
    L1, a1, b1 = lab1.double().unbind(-3)
    L2, a2, b2 = lab2.double().unbind(-3)
    c_mean = (torch.hypot(a1, b1) + torch.hypot(a2, b2)) / 2
    c7 = c_mean**7
    g = 0.5 * (1 - torch.sqrt(c7 / (c7 + _SEVEN)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = torch.hypot(a1p, b1), torch.hypot(a2p, b2)
    # hue angles in degrees, 0..360; atan2(0, 0) = 0, the paper's h' = 0 for a grey
    h1p = torch.rad2deg(torch.atan2(b1, a1p)) % 360
    h2p = torch.rad2deg(torch.atan2(b2, a2p)) % 360
    # ... and 0, not 180, for a grey whose a* is -0.0
    h1p, h2p = torch.where(c1p == 0, 0.0, h1p), torch.where(c2p == 0, 0.0, h2p)
    grey = (c1p * c2p) == 0  # either colour without chroma: its hue means nothing

    dl = L2 - L1
    dc = c2p - c1p
    dh = h2p - h1p
    dh = torch.where(dh > 180, dh - 360, torch.where(dh < -180, dh + 360, dh))
    dh = torch.where(grey, torch.zeros_like(dh), dh)
    d_big_h = 2 * torch.sqrt(c1p * c2p) * torch.sin(torch.deg2rad(dh) / 2)

    l_mean = (L1 + L2) / 2
    cp_mean = (c1p + c2p) / 2
    h_sum = h1p + h2p
    # the mean hue, taken the short way round the circle
    h_mean = torch.where(
        (h1p - h2p).abs() <= 180, h_sum / 2, torch.where(h_sum < 360, (h_sum + 360) / 2, (h_sum - 360) / 2)
    )
    h_mean = torch.where(grey, h_sum, h_mean)

    rad = math.pi / 180
    t = (
        1
        - 0.17 * torch.cos((h_mean - 30) * rad)
        + 0.24 * torch.cos(2 * h_mean * rad)
        + 0.32 * torch.cos((3 * h_mean + 6) * rad)
        - 0.20 * torch.cos((4 * h_mean - 63) * rad)
    )
    d_theta = 30 * torch.exp(-(((h_mean - 275) / 25) ** 2))
    cp7 = cp_mean**7
    r_c = 2 * torch.sqrt(cp7 / (cp7 + _SEVEN))
    l50 = (l_mean - 50) ** 2
    s_l = 1 + 0.015 * l50 / torch.sqrt(20 + l50)
    s_c = 1 + 0.045 * cp_mean
    s_h = 1 + 0.015 * cp_mean * t
    r_t = -torch.sin(2 * d_theta * rad) * r_c
    tl, tc, th = dl / s_l, dc / s_c, d_big_h / s_h
    # the rounding of a tiny difference can leave the sum a hair below zero
    return torch.sqrt((tl**2 + tc**2 + th**2 + r_t * tc * th).clamp_min(0))


def colour_drift(sr8: torch.Tensor, hr8: torch.Tensor, border: int) -> dict[str, float]:
    """Two 3xHxW uint8 images, `border` px shaved from each side (as PSNR's):
    {ciede2000: the mean difference, ciede2000_p99: its 99th percentile over
    the pixels, shift_a, shift_b: the mean a* and b* of SR less HR's}."""
    if border > 0:
        sr8, hr8 = sr8[:, border:-border, border:-border], hr8[:, border:-border, border:-border]
    lab_sr, lab_hr = rgb_to_lab(sr8), rgb_to_lab(hr8)
    de = ciede2000(lab_sr, lab_hr).flatten()
    shift = (lab_sr[1:] - lab_hr[1:]).mean(dim=(1, 2))
    return {
        "ciede2000": de.mean().item(),
        "ciede2000_p99": percentile(de, 99.0),
        "shift_a": shift[0].item(),
        "shift_b": shift[1].item(),
    }


def percentile(values: torch.Tensor, q: float) -> float:
    """The q-th percentile of a 1-D tensor, linearly interpolated between the
    order statistics as numpy's default is (torch.quantile refuses more than
    16M values; kthvalue takes any number)."""
    n = values.numel()
    position = (n - 1) * q / 100
    low = math.floor(position)
    lower = values.kthvalue(low + 1).values.item()
    if position == low:
        return lower
    upper = values.kthvalue(low + 2).values.item()
    return lower + (upper - lower) * (position - low)
