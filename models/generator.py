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
    """conv-BN-PReLU-conv-BN with an identity skip (BN optional); the branch
    scaled by `res_scale` (EDSR's residual scaling: below 1, deep and wide
    stacks without BN train stably)."""

    def __init__(self, channels: int, norm: str = "batch", res_scale: float = 1.0):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = norm_layer(norm, channels)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = norm_layer(norm, channels)
        self.res_scale = res_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.bn2(self.conv2(self.prelu(self.bn1(self.conv1(x)))))
        return x + branch * self.res_scale if self.res_scale != 1.0 else x + branch


class UpsampleBlock(nn.Module):
    """x2 (or x3) by sub-pixel convolution: conv to 4C (9C) channels,
    PixelShuffle(2) (3), PReLU."""

    def __init__(self, channels: int, factor: int = 2):
        super().__init__()
        self.factor = factor
        self.conv = nn.Conv2d(channels, channels * factor**2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(factor)
        self.prelu = nn.PReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.prelu(self.shuffle(self.conv(x)))


class Generator(nn.Module):
    """LR image in [0, 1] -> SR image in [0, 1], `scale` times larger.

    residual "none": the paper's SRResNet, its output through (tanh + 1) / 2.
    residual "bicubic": the network predicts a correction added to the
    bicubic upscale of its input (global residual learning, VDSR); its tail
    starts at zero, so a fresh model is bicubic and its first steps refine
    what bicubic gets right instead of learning to reproduce the input.
    icnr: the sub-pixel convolutions start as nearest-neighbour upsampling
    of a random kernel (ICNR, Aitken et al. 2017): no checkerboard at the
    start for training to remove."""

    arch = "srresnet"
    tile_align = 1  # translation-equivariant: a tile may start anywhere

    def __init__(
        self,
        scale: int = 4,
        blocks: int = 16,
        channels: int = 64,
        norm: str = "batch",
        residual: str = "none",
        res_scale: float = 1.0,
        icnr: bool = False,
    ):
        super().__init__()
        if scale not in (2, 3, 4, 8):
            raise ValueError(f"scale must be 2, 3, 4 or 8, not {scale}")
        self.scale, self.blocks, self.channels, self.norm = scale, blocks, channels, norm
        self.residual = residual
        self.head = nn.Sequential(nn.Conv2d(3, channels, 9, padding=4), nn.PReLU())
        self.body = nn.Sequential(*(ResidualBlock(channels, norm, res_scale) for _ in range(blocks)))
        self.body_end = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), norm_layer(norm, channels))
        # x2, x4, x8: log2(scale) x2 stages (the paper's); x3: one x3 stage (EDSR's).
        self.factors = [3] if scale == 3 else [2] * int(math.log2(scale))
        stages = [UpsampleBlock(channels, factor) for factor in self.factors]
        self.upsample = nn.Sequential(*stages)
        self.tail = nn.Conv2d(channels, 3, 9, padding=4)
        if icnr:
            for stage in stages:
                icnr_init(stage.conv.weight, stage.factor)
        if residual == "bicubic":
            nn.init.zeros_(self.tail.weight)
            assert self.tail.bias is not None  # a Conv2d's bias, by default
            nn.init.zeros_(self.tail.bias)
            self.bicubic = BicubicUpsample(scale)

    @classmethod
    def from_config(cls, model: ModelConfig) -> Generator:
        """The generator a config's `model` section describes."""
        return cls(model.scale, model.blocks, model.channels, model.norm, model.residual, model.res_scale, model.icnr)

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
        # faster: oneDNN runs a conv with 3 output channels poorly.
        last = self.upsample[-1]
        assert isinstance(last, UpsampleBlock) and self.tail.bias is not None  # both built so in __init__
        if last.factor != 2:  # x3: the plain order (the rearrangement below is written for x2)
            h = self.tail(last(h))
            return self.bicubic(x) + h if self.residual == "bicubic" else (torch.tanh(h) + 1) / 2
        h = last.prelu(last.conv(h))
        weight = tail_before_shuffle(self.tail.weight)
        h = F.conv2d(h, weight, self.tail.bias.repeat_interleave(4), padding=weight.shape[-1] // 2)
        h = F.pixel_shuffle(h, 2)
        if self.residual == "bicubic":
            return self.bicubic(x) + h
        # (tanh + 1) / 2 maps tanh's [-1, 1] onto the image range [0, 1].
        return (torch.tanh(h) + 1) / 2

    @property
    def receptive_radius(self) -> int:
        """How many LR pixels away an input pixel can still change an output
        pixel: the context a tile needs so that tiled and whole-image outputs
        agree. It traces back exactly through the layers from the HR pixels
        of one LR pixel (at index 0)."""
        worst = 0
        for offset in range(self.scale):
            lo, hi = offset - 4, offset + 4  # the 9x9 tail
            for factor in self.factors:
                # back through PixelShuffle(factor) to the coarser grid, then its 3x3 conv
                lo, hi = lo // factor - 1, hi // factor + 1
            lr_reach = 4 + 2 * self.blocks + 1  # head 9x9, two 3x3 a block, body_end 3x3
            worst = max(worst, lr_reach - lo, hi + lr_reach)
        if self.residual == "bicubic":
            worst = max(worst, BicubicUpsample.REACH)
        return worst


class BicubicUpsample(nn.Module):
    """Bicubic upscaling by an integer factor with the kernel of PIL's
    bicubic (a = -0.5), the one the LR images are made and scored with: per
    output phase a fixed 5x5 filter (from the coarse grid), then
    PixelShuffle. Edges are replicated (PIL renormalises its kernel there:
    the two differ in the outermost pixels only)."""

    REACH = 2  # LR pixels each side an output pixel reads
    kernel: torch.Tensor  # a buffer

    def __init__(self, scale: int):
        super().__init__()
        self.scale = scale
        taps = torch.arange(-self.REACH, self.REACH + 1, dtype=torch.float64)
        phases = []
        for p in range(scale):
            t = (p + 0.5) / scale - 0.5  # where output phase p samples, in LR pixels from its cell
            w = cubic(taps - t)
            phases.append(w / w.sum())
        rows = torch.stack(phases)  # scale x 5
        kernel = torch.einsum("yi,xj->yxij", rows, rows).reshape(scale * scale, 1, 5, 5)
        self.register_buffer("kernel", kernel.float().repeat(3, 1, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x, (self.REACH,) * 4, mode="replicate")
        return F.pixel_shuffle(F.conv2d(padded, self.kernel.to(x.dtype), groups=x.shape[1]), self.scale)


def cubic(x: torch.Tensor, a: float = -0.5) -> torch.Tensor:
    """Keys' cubic convolution kernel; a = -0.5 is PIL's bicubic."""
    x = x.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x <= 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def icnr_init(weight: torch.Tensor, upscale: int) -> None:
    """ICNR: set the (C*r^2) x C x k x k weight before PixelShuffle(r) to r^2
    copies of one random C x C x k x k kernel, so the shuffled output starts
    as a nearest-neighbour upsampling (Aitken et al. 2017)."""
    out_channels = weight.shape[0] // upscale**2
    base = torch.empty(out_channels, *weight.shape[1:], dtype=weight.dtype)
    nn.init.kaiming_uniform_(base, a=math.sqrt(5))  # what nn.Conv2d would have drawn
    with torch.no_grad():
        weight.copy_(base.repeat_interleave(upscale**2, dim=0))


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
    atomics on the CPU, so two identical runs would differ)."""
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
                    phases.append(padded[:, :, top : top + 2 * size - 1 : 2, left : left + 2 * size - 1 : 2])
            rows.append(torch.stack(phases, dim=2).flatten(1, 2))  # 3 x 4C x s x s, channel 4c + p
    return torch.stack(rows, dim=1).flatten(0, 1)  # 12 x 4C x s x s, channel 4o + q
