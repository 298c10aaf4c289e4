"""pix2pix's PatchGAN discriminator (Isola et al. 2017, the n-layer design of
its NLayerDiscriminator) with spectral normalisation (Miyato et al. 2018) in
place of its BatchNorm, as the SR trainers use it: a logit per overlapping
patch (70x70 px with 3 layers), so D judges texture everywhere rather than a
single verdict per crop. Spectral norm is torch.nn.utils.spectral_norm (weights
weight_orig, weight_u, weight_v), as in the U-Net D; parameter names follow
pix2pix's `model.N`."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import spectral_norm


class PatchGANDiscriminatorSN(nn.Module):
    """A 4x4 stride-2 conv to num_feat, then `layers` - 1 more stride-2 convs
    doubling the width (at most 8 x num_feat), one 4x4 stride-1 conv, and a
    4x4 stride-1 conv to one channel; LeakyReLU(0.2) between. Every conv but
    the last is spectrally normalised (pix2pix normalises none of the first
    and the last; spectral norm on the first bounds D's Lipschitz constant
    end to end). Logits of shape (N, 1, H / 2^layers - 2, W / 2^layers - 2)."""

    def __init__(self, num_feat: int = 64, layers: int = 3):
        super().__init__()
        widths = [num_feat * min(2**i, 8) for i in range(layers + 1)]
        modules: list[nn.Module] = []
        c_in = 3
        for i, c_out in enumerate(widths):
            stride = 2 if i < layers else 1
            modules += [spectral_norm(nn.Conv2d(c_in, c_out, 4, stride, 1)), nn.LeakyReLU(0.2)]
            c_in = c_out
        modules.append(nn.Conv2d(c_in, 1, 4, 1, 1))
        self.model = nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A logit per patch, shape (N, 1, H', W')."""
        return self.model(x)
