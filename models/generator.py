"""SRResNet, the SRGAN generator (Ledig et al. 2017, fig. 4)."""
from __future__ import annotations

import math

import torch
from torch import nn


class ResidualBlock(nn.Module):
    """conv-BN-PReLU-conv-BN with an identity skip."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bn2(self.conv2(self.prelu(self.bn1(self.conv1(x)))))


class UpsampleBlock(nn.Module):
    """x2 by sub-pixel convolution: conv to 4C channels, PixelShuffle(2), PReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels * 4, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        self.prelu = nn.PReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prelu(self.shuffle(self.conv(x)))


class Generator(nn.Module):
    """LR image in [0, 1] -> SR image in [0, 1], `scale` times larger."""

    def __init__(self, scale: int = 4, blocks: int = 16, channels: int = 64):
        super().__init__()
        if scale not in (2, 4, 8):
            raise ValueError(f"scale must be 2, 4 or 8, not {scale}")
        self.scale, self.blocks, self.channels = scale, blocks, channels
        self.head = nn.Sequential(nn.Conv2d(3, channels, 9, padding=4), nn.PReLU())
        self.body = nn.Sequential(*(ResidualBlock(channels) for _ in range(blocks)))
        self.body_end = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels))
        self.upsample = nn.Sequential(*(UpsampleBlock(channels) for _ in range(int(math.log2(scale)))))
        self.tail = nn.Conv2d(channels, 3, 9, padding=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.head(x)
        h = h + self.body_end(self.body(h))  # the long skip
        # (tanh + 1) / 2 maps to [0, 1] with the gradient of the seed code.
        return (torch.tanh(self.tail(self.upsample(h))) + 1) / 2

    @property
    def receptive_radius(self) -> int:
        """How many LR pixels away an input pixel can still change an output
        pixel: the context a tile needs so that tiled and whole-image outputs
        agree. Traced back exactly through the layers from the HR pixels of
        one LR pixel (at index 0)."""
        worst = 0
        for offset in range(self.scale):
            lo, hi = offset - 4, offset + 4  # the 9x9 tail
            for _ in self.upsample:
                # back through PixelShuffle(2) to the coarser grid, then its 3x3 conv
                lo, hi = lo // 2 - 1, hi // 2 + 1
            lr_reach = 4 + 2 * self.blocks + 1  # head 9x9, two 3x3 a block, body_end 3x3
            worst = max(worst, lr_reach - lo, hi + lr_reach)
        return worst
