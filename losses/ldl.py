"""LDL: the locally discriminative learning loss of Liang et al. (CVPR 2022,
"Details or Artifacts: A Locally Discriminative Learning Approach to Realistic
Image Super-Resolution"), as BasicSR's ESRGANArtifactsDisModel computes it.

A GAN's artefacts are pixels whose error is both large and noisy: the local
variance of the residual |HR - SR| finds them, and the EMA generator (a
stabler model of the same run) tells artefacts, which it has fewer of, from
details both models get wrong alike. The map is zero where the EMA model's
residual is larger than the generator's (no artefact of the generator's
own there); elsewhere the generator is pulled to HR in proportion to it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

WINDOW = 7  # the local variance's window, 7x7 as BasicSR's (ksize 7)


def local_variance(x: torch.Tensor, window: int = WINDOW) -> torch.Tensor:
    """Nx1xHxW -> the unbiased variance of each pixel's window x window
    neighbourhood, the border reflected, Nx1xHxW. H and W must exceed
    window // 2 (reflection's limit)."""
    pad = window // 2
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    patches = padded.unfold(2, window, 1).unfold(3, window, 1)  # N x 1 x H x W x window x window
    return patches.flatten(-2).var(dim=-1, correction=1)


def artefact_map(sr: torch.Tensor, hr: torch.Tensor, ema_sr: torch.Tensor) -> torch.Tensor:
    """Nx1xHxW: the refined artefact map. The residual is summed over the
    channels (BasicSR's torch.sum, not a mean); the image's weight is the
    unbiased variance of its whole residual to the power 1/5, times each
    pixel's local variance (the image's variance floored at 1e-20); zero
    where the EMA residual exceeds SR's. Like
    BasicSR's, it is not detached: the gradient also flows through the map."""
    residual = (hr - sr).abs().sum(1, keepdim=True)
    ema_residual = (hr - ema_sr).abs().sum(1, keepdim=True)
    # the floor keeps the 1/5 power's gradient finite for an image SR already reproduces exactly
    image_weight = residual.flatten(1).var(dim=1, correction=1).clamp_min(1e-20).pow(0.2)[:, None, None, None]
    weight = image_weight * local_variance(residual)
    return torch.where(residual < ema_residual, torch.zeros_like(weight), weight)


def ldl_loss(sr: torch.Tensor, hr: torch.Tensor, ema_sr: torch.Tensor) -> torch.Tensor:
    """The L1 distance of map * SR to map * HR (BasicSR's artifacts_opt: an
    L1Loss, mean reduction), the map from artefact_map; `ema_sr` is the EMA
    generator's output for the same LR, computed without gradient."""
    weight = artefact_map(sr, hr, ema_sr)
    return F.l1_loss(weight * sr, weight * hr)
