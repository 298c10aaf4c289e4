"""Real-ESRGAN's discriminator: `UNetDiscriminatorSN` (Wang et al. 2021), a
U-Net with spectral normalisation and skip connections that gives one logit
per pixel. Parameter names as Real-ESRGAN's (BasicSR's), so that its state
dicts (RealESRGAN_x4plus_netD.pth) load with strict=True: spectral norm is
torch.nn.utils.spectral_norm, whose weights are weight_orig, weight_u and
weight_v."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm


class UNetDiscriminatorSN(nn.Module):
    """conv0, three stride-2 convs down (num_feat to 8 x num_feat), three
    bilinear x2 upsamplings each followed by a conv and added to the
    same-size feature on the way down, two more convs, and a conv to one
    channel: logits of shape (N, 1, H, W). Every conv but the first and the
    last is spectrally normalised. Crops must be multiples of 8."""

    def __init__(self, num_feat: int = 64, skip_connection: bool = True):
        super().__init__()
        f = num_feat
        self.skip_connection = skip_connection
        self.conv0 = nn.Conv2d(3, f, kernel_size=3, stride=1, padding=1)
        self.conv1 = spectral_norm(nn.Conv2d(f, f * 2, 4, 2, 1, bias=False))
        self.conv2 = spectral_norm(nn.Conv2d(f * 2, f * 4, 4, 2, 1, bias=False))
        self.conv3 = spectral_norm(nn.Conv2d(f * 4, f * 8, 4, 2, 1, bias=False))
        self.conv4 = spectral_norm(nn.Conv2d(f * 8, f * 4, 3, 1, 1, bias=False))
        self.conv5 = spectral_norm(nn.Conv2d(f * 4, f * 2, 3, 1, 1, bias=False))
        self.conv6 = spectral_norm(nn.Conv2d(f * 2, f, 3, 1, 1, bias=False))
        self.conv7 = spectral_norm(nn.Conv2d(f, f, 3, 1, 1, bias=False))
        self.conv8 = spectral_norm(nn.Conv2d(f, f, 3, 1, 1, bias=False))
        self.conv9 = nn.Conv2d(f, 1, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def act(t: torch.Tensor) -> torch.Tensor:
            return F.leaky_relu(t, 0.2, inplace=True)

        x0 = act(self.conv0(x))
        x1 = act(self.conv1(x0))
        x2 = act(self.conv2(x1))
        x3 = act(self.conv3(x2))
        x4 = act(self.conv4(upsample_bilinear_x2(x3)))
        if self.skip_connection:
            x4 = x4 + x2
        x5 = act(self.conv5(upsample_bilinear_x2(x4)))
        if self.skip_connection:
            x5 = x5 + x1
        x6 = act(self.conv6(upsample_bilinear_x2(x5)))
        if self.skip_connection:
            x6 = x6 + x0
        out = act(self.conv7(x6))
        out = act(self.conv8(out))
        return self.conv9(out)


def upsample_bilinear_x2(x: torch.Tensor) -> torch.Tensor:
    """F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
    written with slices and sums: that kernel's CUDA backward has no
    deterministic implementation, and train.deterministic (the default)
    would refuse it. Each output pixel is 3/4 of its nearest input pixel and
    1/4 of the next one outwards, the border pixel repeated at the edges."""
    return _twice_along(_twice_along(x, 3), 2)


def _twice_along(x: torch.Tensor, dim: int) -> torch.Tensor:
    n = x.shape[dim]
    before = torch.cat([x.narrow(dim, 0, 1), x.narrow(dim, 0, n - 1)], dim)  # x[i-1], x[0] at the edge
    after = torch.cat([x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)], dim)  # x[i+1], x[n-1] at the edge
    even = 0.75 * x + 0.25 * before
    odd = 0.75 * x + 0.25 * after
    shape = list(x.shape)
    shape[dim] = 2 * n
    return torch.stack([even, odd], dim + 1).reshape(shape)
