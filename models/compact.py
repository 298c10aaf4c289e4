"""SRVGGNetCompact, Real-ESRGAN's small fast generator (Wang et al. 2021,
"Real-ESRGAN", the realesr-animevideov3 and realesr-general-x4v3 models),
laid out as Real-ESRGAN's `SRVGGNetCompact` so that its weights load with
`strict=True`:

    body.0, body.1          3x3 conv 3 -> C, PReLU (one slope a channel)
    body.2k, body.2k+1      `convs` times: 3x3 conv C -> C, PReLU
    body.2K+2               3x3 conv C -> 3 x scale^2
    PixelShuffle(scale), plus the nearest-neighbour upscale of the input

Every layer runs at the input's size; only the shuffle makes it larger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from srgan.configs.schema import ModelConfig

SCALES = (1, 2, 3, 4, 8)  # any would do; these are the ones srgan's data and configs offer


class SRVGGNetCompact(nn.Module):
    """LR image -> SR image, `scale` times larger: a residual over the
    nearest-neighbour upscale of the input, not clamped."""

    arch = "compact"
    tile_align = 1  # translation-equivariant: a tile may start anywhere

    def __init__(self, scale: int = 4, convs: int = 32, channels: int = 64):
        super().__init__()
        if scale not in SCALES:
            raise ValueError(f"compact: scale must be one of {SCALES}, not {scale}")
        self.scale, self.blocks, self.channels = scale, convs, channels
        layers: list[nn.Module] = [nn.Conv2d(3, channels, 3, padding=1), nn.PReLU(channels)]
        for _ in range(convs):
            layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.PReLU(channels)]
        layers.append(nn.Conv2d(channels, 3 * scale * scale, 3, padding=1))
        initialise(layers)
        # A ModuleList, as Real-ESRGAN's (its keys are body.<index>.*)
        self.body = nn.ModuleList(layers)
        self.upsampler = nn.PixelShuffle(scale)

    @classmethod
    def from_config(cls, model: ModelConfig) -> SRVGGNetCompact:
        return cls(model.scale, model.blocks, model.channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x
        for layer in self.body:
            out = layer(out)
        return self.upsampler(out) + F.interpolate(x, scale_factor=self.scale, mode="nearest")

    @property
    def receptive_radius(self) -> int:
        """Input pixels an output pixel reads on each side: one per 3x3 conv
        (convs + 2 of them), all on the input's grid."""
        return self.blocks + 2


def initialise(layers: list[nn.Module]) -> None:
    """Start the plain stack as a shallow network: the middle convs begin as
    the identity (a Dirac kernel) plus a little He-scaled noise, in the
    spirit of Xiao et al. 2018's delta-orthogonal initialisation for deep
    plain CNNs; the first conv is He-initialised for PReLU's starting slope
    (0.25), and the last starts at a tenth of He's scale, so the network
    starts close to the nearest-neighbour upscale it adds.

    Why: with random (He) middle convs, L1 training first shrinks the stack's
    random output, and at 32 convs the signal through the stack collapses
    with it; the network then sits at nearest-neighbour quality for hundreds
    of steps. PyTorch's default initialisation (Real-ESRGAN's) is worse
    still: almost no gradient reaches the first layer. From the identity
    start a deep stack learns as fast as a shallow one (docs/quality.md has
    the runs; tests/test_arch.py checks that a 32-conv stack learns in its
    first 100 steps)."""
    convs = [layer for layer in layers if isinstance(layer, nn.Conv2d)]
    for conv in convs:
        nn.init.kaiming_normal_(conv.weight, a=0.25, nonlinearity="leaky_relu")
        assert conv.bias is not None  # every conv here has one, as Real-ESRGAN's
        nn.init.zeros_(conv.bias)
    with torch.no_grad():
        for conv in convs[1:-1]:
            noise = conv.weight.mul(0.1)
            nn.init.dirac_(conv.weight)
            conv.weight.add_(noise)
        convs[-1].weight.mul_(0.1)
