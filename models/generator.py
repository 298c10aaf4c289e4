"""SRResNet, the SRGAN generator (Ledig et al. 2017, fig. 4)."""
from __future__ import annotations

import math

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from srgan.configs.schema import ModelConfig


def norm_layer(kind: str, channels: int) -> nn.Module:
    """BatchNorm (the paper's SRResNet) or none (EDSR, ESRGAN: BN's running
    statistics shift colours in eval mode and its batch statistics cost
    detail)."""
    return nn.BatchNorm2d(channels) if kind == "batch" else nn.Identity()


class ResidualBlock(nn.Module):
    """conv-BN-PReLU-conv-BN with an identity skip (BN optional)."""

    def __init__(self, channels: int, norm: str = "batch"):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = norm_layer(norm, channels)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = norm_layer(norm, channels)

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

    def __init__(self, scale: int = 4, blocks: int = 16, channels: int = 64, norm: str = "batch"):
        super().__init__()
        if scale not in (2, 4, 8):
            raise ValueError(f"scale must be 2, 4 or 8, not {scale}")
        self.scale, self.blocks, self.channels, self.norm = scale, blocks, channels, norm
        self.head = nn.Sequential(nn.Conv2d(3, channels, 9, padding=4), nn.PReLU())
        self.body = nn.Sequential(*(ResidualBlock(channels, norm) for _ in range(blocks)))
        self.body_end = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), norm_layer(norm, channels))
        self.upsample = nn.Sequential(*(UpsampleBlock(channels) for _ in range(int(math.log2(scale)))))
        self.tail = nn.Conv2d(channels, 3, 9, padding=4)

    @classmethod
    def from_config(cls, model: "ModelConfig") -> "Generator":
        """The generator a config's `model` section describes."""
        return cls(model.scale, model.blocks, model.channels, model.norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.head(x)
        h = h + self.body_end(self.body(h))  # the long skip
        for block in self.upsample[:-1]:
            h = block(h)
        # The last x2 stage and the 9x9 tail compute tail(prelu(shuffle(conv(h)))),
        # rearranged: PixelShuffle only moves values and the PReLU has one slope,
        # so the tail can run before the shuffle, on the coarser grid, as a 5x5
        # conv from the 4 x C phase channels to 4 x 3. The same function with
        # the same parameters, without the C-channel full-resolution tensors, and
        # 2x faster: oneDNN runs a conv with 3 output channels poorly.
        last = self.upsample[-1]
        h = last.prelu(last.conv(h))
        weight = tail_before_shuffle(self.tail.weight)
        h = F.conv2d(h, weight, self.tail.bias.repeat_interleave(4), padding=weight.shape[-1] // 2)
        h = F.pixel_shuffle(h, 2)
        # (tanh + 1) / 2 maps to [0, 1] with the gradient of the seed code.
        return (torch.tanh(h) + 1) / 2

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


def tail_before_shuffle(weight: torch.Tensor) -> torch.Tensor:
    """For a k x k conv weight (3 x C x k x k, padding k // 2) applied after
    PixelShuffle(2): the equivalent conv weight applied before the shuffle,
    12 x 4C x s x s. Its input channel 4c + 2py + px holds channel c at
    phase (py, px) and its output channel 4o + 2qy + qx is output o at phase
    (qy, qx); a full-resolution offset dy from phase qy to phase py is a
    coarse step by = (dy + qy - py) / 2, |by| <= reach = (k // 2 + 1) // 2,
    so each (q, p) kernel is a stride-2 slice of the weight padded by one.

    Slices and stacks only: the backward adds the 16 slices' gradients in a
    fixed order (an indexed gather's backward adds into repeated indices with
    atomics on the CPU, which made two identical runs differ)."""
    kernel = weight.shape[-1]
    half = kernel // 2
    reach = (half + 1) // 2
    size = 2 * reach + 1
    padded = F.pad(weight, (1, 1, 1, 1))  # offsets one beyond the kernel read zeros
    rows = []
    for qy in range(2):
        for qx in range(2):
            phases = []
            for py in range(2):
                for px in range(2):
                    top = half + 1 - 2 * reach + py - qy
                    left = half + 1 - 2 * reach + px - qx
                    phases.append(padded[:, :, top:top + 2 * size - 1:2, left:left + 2 * size - 1:2])
            rows.append(torch.stack(phases, dim=2).flatten(1, 2))  # 3 x 4C x s x s, channel 4c + p
    return torch.stack(rows, dim=1).flatten(0, 1)  # 12 x 4C x s x s, channel 4o + q
