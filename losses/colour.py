"""Colour and luma losses, in YCbCr (BT.601, the scaling of MATLAB's
rgb2ycbcr, as PSNR and SSIM here are measured).

Why YCbCr rather than Oklab: it is linear in RGB, so it costs one 3x3
matrix and its gradient is the same everywhere, where Oklab's cube roots
have an unbounded gradient at black; and its Y is the channel PSNR/SSIM
are reported on, so the luma loss works on the measured channel. Its
chroma is less perceptually uniform than Oklab's, which matters little for
a loss that only has to hold the average colour of a region in place.

The colour loss compares the chroma (Cb, Cr) of SR and HR after a box
low-pass (means over `window` x `window` blocks): texture may move at the
scale of a few pixels, the colour of a region may not (the white that
becomes #FEFEFE, the skin that turns yellow). The luma loss is an L1 on Y
at full resolution."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from srgan.metrics.psnr_ssim import Y_WEIGHTS

# BT.601 for RGB in [0, 1] -> YCbCr in [0, 1]: MATLAB rgb2ycbcr's matrix and offsets divided by 255,
# its Y row the one PSNR/SSIM are measured with
_MATRIX = (
    Y_WEIGHTS,
    (-37.797, -74.203, 112.0),
    (112.0, -93.786, -18.214),
)
_OFFSET = (16.0, 128.0, 128.0)


def rgb_to_ycbcr(rgb: torch.Tensor) -> torch.Tensor:
    """Nx3xHxW RGB in [0, 1] -> Nx3xHxW YCbCr (BT.601, Y in [16, 235] / 255,
    Cb and Cr in [16, 240] / 255), in rgb's dtype."""
    matrix = torch.tensor(_MATRIX, dtype=rgb.dtype, device=rgb.device) / 255.0
    offset = torch.tensor(_OFFSET, dtype=rgb.dtype, device=rgb.device) / 255.0
    return torch.einsum("ij,njhw->nihw", matrix, rgb) + offset[None, :, None, None]


def colour_loss(sr: torch.Tensor, hr: torch.Tensor, window: int = 8) -> torch.Tensor:
    """The mean absolute difference of SR's and HR's Cb and Cr, each averaged
    over non-overlapping window x window blocks (a partial block at the right
    or bottom edge is left out). Needs H and W of at least `window`."""
    chroma_sr = rgb_to_ycbcr(sr.float())[:, 1:]
    chroma_hr = rgb_to_ycbcr(hr.float())[:, 1:]
    return F.l1_loss(F.avg_pool2d(chroma_sr, window), F.avg_pool2d(chroma_hr, window))


def luma_loss(sr: torch.Tensor, hr: torch.Tensor) -> torch.Tensor:
    """The mean absolute difference of SR's and HR's Y, pixel by pixel."""
    return F.l1_loss(rgb_to_ycbcr(sr.float())[:, :1], rgb_to_ycbcr(hr.float())[:, :1])
