"""Focal frequency loss (Jiang et al., ICCV 2021, "Focal Frequency Loss for
Image Reconstruction and Synthesis"), with the reference implementation's
defaults: the whole image as one patch (patch_factor 1), each image's own
spectrum (ave_spectrum false), no logarithm on the weights (log_matrix
false), weights normalised per image and channel (batch_matrix false).

A pixel loss lets the generator neglect the frequencies that are hard to
synthesise (the fine texture a GAN then invents or smears); FFL weights each
frequency's error by its own size, so the hardest frequencies get the most
attention, and the weights move as training fixes them."""

from __future__ import annotations

import torch


def focal_frequency_loss(sr: torch.Tensor, hr: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """NxCxHxW -> the mean over images, channels and frequencies of w * d,
    where d = |F(sr) - F(hr)|^2 for the orthonormal 2-D DFT F and the
    weight w = |F(sr) - F(hr)|^alpha divided by its largest value in the
    image's channel (0 where that is 0), without gradient."""
    difference = torch.fft.fft2(sr.float(), norm="ortho") - torch.fft.fft2(hr.float(), norm="ortho")
    distance = difference.real.square() + difference.imag.square()
    with torch.no_grad():
        weight = distance.sqrt().pow(alpha)
        peak = weight.amax(dim=(-2, -1), keepdim=True)
        # a channel SR already matches exactly has no error to weight (the reference's NaN -> 0)
        weight = torch.where(peak > 0, weight / peak.clamp_min(torch.finfo(weight.dtype).tiny), 0.0).clamp(0, 1)
    return (weight * distance).mean()
