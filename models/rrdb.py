"""RRDBNet, the ESRGAN generator (Wang et al. 2018, "ESRGAN: Enhanced
Super-Resolution Generative Adversarial Networks", fig. 3 and 4), laid out
as BasicSR's and Real-ESRGAN's `RRDBNet` so that their weights load with
`strict=True`:

    conv_first                          3x3, input (pixel-unshuffled for x1, x2) -> C
    body.N.rdb{1,2,3}.conv{1..5}        N residual-in-residual dense blocks
    conv_body                           3x3, then the long skip from conv_first
    conv_up1, conv_up2                  nearest x2 then 3x3 + LeakyReLU, twice
    conv_hr, conv_last                  3x3 + LeakyReLU, 3x3 -> RGB

No BatchNorm; LeakyReLU(0.2); residuals scaled by 0.2. The body always
works at a quarter of the output's size: x4 on the input as it is, x2 and
x1 (Real-ESRGAN's) on the input pixel-unshuffled by 2 or 4.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from srgan.configs.schema import ModelConfig

SCALES = (1, 2, 4)
RESIDUAL_SCALE = 0.2  # ESRGAN's residual scaling (section 3.2)


class ResidualDenseBlock(nn.Module):
    """Five 3x3 convs, each reading the block's input and every output before
    it (dense connections, `growth` channels each); the fifth maps back to
    `channels` and is added to the input, scaled by 0.2."""

    def __init__(self, channels: int = 64, growth: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, growth, 3, padding=1)
        self.conv2 = nn.Conv2d(channels + growth, growth, 3, padding=1)
        self.conv3 = nn.Conv2d(channels + 2 * growth, growth, 3, padding=1)
        self.conv4 = nn.Conv2d(channels + 3 * growth, growth, 3, padding=1)
        self.conv5 = nn.Conv2d(channels + 4 * growth, channels, 3, padding=1)
        self.lrelu = nn.LeakyReLU(0.2)
        # ESRGAN's smaller initialisation (section 3.2): Kaiming-normal weights
        # times 0.1 and zero biases, so that a deep stack starts near identity.
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4, self.conv5):
            nn.init.kaiming_normal_(conv.weight)
            with torch.no_grad():
                conv.weight.mul_(0.1)
            nn.init.zeros_(conv.bias)  # type: ignore[arg-type]  # built with bias=True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
            features.append(self.lrelu(conv(torch.cat(features, 1))))
        return x + self.conv5(torch.cat(features, 1)) * RESIDUAL_SCALE


class RRDB(nn.Module):
    """Three dense blocks in sequence with a skip around them, scaled by 0.2."""

    def __init__(self, channels: int = 64, growth: int = 32):
        super().__init__()
        self.rdb1 = ResidualDenseBlock(channels, growth)
        self.rdb2 = ResidualDenseBlock(channels, growth)
        self.rdb3 = ResidualDenseBlock(channels, growth)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.rdb3(self.rdb2(self.rdb1(x))) * RESIDUAL_SCALE


class RRDBNet(nn.Module):
    """LR image -> SR image, `scale` (1, 2 or 4) times larger; the output is
    not clamped (the image losses see what the network computes).

    Inputs of any size: for x1 and x2, whose first step groups 4x4 or 2x2
    pixels, a side that is not a multiple of the group is reflect-padded at
    the bottom/right and the padding's output cut off again (as Real-ESRGAN's
    inference does before calling the network)."""

    arch = "rrdb"

    def __init__(self, scale: int = 4, blocks: int = 23, channels: int = 64, growth: int = 32):
        super().__init__()
        if scale not in SCALES:
            raise ValueError(f"rrdb: scale must be 1, 2 or 4, not {scale}")
        self.scale, self.blocks, self.channels, self.growth = scale, blocks, channels, growth
        self.unshuffle = 4 // scale  # the input pixels one body pixel stands for, a side
        self.conv_first = nn.Conv2d(3 * self.unshuffle**2, channels, 3, padding=1)
        self.body = nn.Sequential(*(RRDB(channels, growth) for _ in range(blocks)))
        self.conv_body = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv_up1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv_up2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv_hr = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv_last = nn.Conv2d(channels, 3, 3, padding=1)
        self.lrelu = nn.LeakyReLU(0.2)

    @classmethod
    def from_config(cls, model: ModelConfig) -> RRDBNet:
        return cls(model.scale, model.blocks, model.channels, model.growth)

    @property
    def tile_align(self) -> int:
        """Tiles must start on multiples of this many input pixels: the
        pixel-unshuffle groups of a tile are then those of the whole image."""
        return self.unshuffle

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        u = self.unshuffle
        if u > 1:
            extra_h, extra_w = -height % u, -width % u
            if extra_h or extra_w:
                # reflect needs a side longer than the pad, so replicate
                # where a tiny input has a side no longer than that
                mode = "reflect" if min(height, width) > max(extra_h, extra_w) else "replicate"
                x = F.pad(x, (0, extra_w, 0, extra_h), mode=mode)
            x = F.pixel_unshuffle(x, u)
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        feat = self.lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode="nearest")))
        feat = self.lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode="nearest")))
        out = self.conv_last(self.lrelu(self.conv_hr(feat)))
        if u > 1:
            out = out[..., : height * self.scale, : width * self.scale]
        return out

    @property
    def receptive_radius(self) -> int:
        """How many input pixels away an input pixel can still change an
        output pixel (the worst over the positions in an unshuffle group):
        15 3x3 convs a block and 2 more on the body's grid, 1 on the grid of
        conv_up1, 3 on the output grid. For the presets that is hundreds of
        pixels, so tiles that exact would cost as much as whole images;
        inference/tile_pad.py measures the pad tiles need on the weights
        instead."""
        body_reach = 2 + 15 * self.blocks  # conv_first, 3 x 5 convs a block, conv_body
        u, worst = self.unshuffle, 0
        for offset in range(u):  # the input pixel's place in its group (body cell 0)
            lo, hi = offset * self.scale - 3, offset * self.scale + self.scale - 1 + 3  # its output pixels; 3 convs
            lo, hi = lo // 2 - 1, hi // 2 + 1  # back through nearest x2, conv_up1
            lo, hi = lo // 2 - body_reach, hi // 2 + body_reach  # back through nearest x2, the body
            worst = max(worst, offset - lo * u, hi * u + u - 1 - offset)  # body cells -> input pixels
        return worst
