"""Image (pixel) loss and total variation."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def image_loss(sr: torch.Tensor, hr: torch.Tensor, kind: str = "mse") -> torch.Tensor:
    """Mean squared (mse) or absolute (l1) difference of the pixels."""
    return F.mse_loss(sr, hr) if kind == "mse" else F.l1_loss(sr, hr)


def tv_loss(x: torch.Tensor) -> torch.Tensor:
    """Total variation as leftthomas/SRGAN defines it: twice the mean squared
    difference of vertical and of horizontal neighbours, per image."""
    dy = x[:, :, 1:, :] - x[:, :, :-1, :]
    dx = x[:, :, :, 1:] - x[:, :, :, :-1]
    per_image_y = dy.pow(2).sum() / dy[0].numel()
    per_image_x = dx.pow(2).sum() / dx[0].numel()
    return 2 * (per_image_y + per_image_x) / x.shape[0]
