"""ESRGAN's discriminator: BasicSR's `VGGStyleDiscriminator` (Wang et al.
2018, after Ledig et al. 2017), with BasicSR's parameter names so that its
state dicts load with strict=True."""

from __future__ import annotations

import torch
from torch import nn


class VGGStyleDiscriminator(nn.Module):
    """Five stages of a 3x3 conv then a 4x4 stride-2 conv (BN after every conv
    but the first, LeakyReLU 0.2), num_feat to 8 x num_feat channels, then
    dense 100 and one logit per image.

    BasicSR builds it for 128 px crops (4 x 4 x 8 num_feat into linear1);
    here linear1 takes the (crop / 32)^2 positions of any crop that is a
    multiple of 32, so 128 px gives BasicSR's network weight for weight.
    (BasicSR's 256 px variant adds a sixth stage instead: not this one.)"""

    def __init__(self, num_feat: int = 64, input_size: int = 128):
        super().__init__()
        f = num_feat
        self.conv0_0 = nn.Conv2d(3, f, 3, 1, 1, bias=True)
        self.conv0_1 = nn.Conv2d(f, f, 4, 2, 1, bias=False)
        self.bn0_1 = nn.BatchNorm2d(f, affine=True)
        self.conv1_0 = nn.Conv2d(f, f * 2, 3, 1, 1, bias=False)
        self.bn1_0 = nn.BatchNorm2d(f * 2, affine=True)
        self.conv1_1 = nn.Conv2d(f * 2, f * 2, 4, 2, 1, bias=False)
        self.bn1_1 = nn.BatchNorm2d(f * 2, affine=True)
        self.conv2_0 = nn.Conv2d(f * 2, f * 4, 3, 1, 1, bias=False)
        self.bn2_0 = nn.BatchNorm2d(f * 4, affine=True)
        self.conv2_1 = nn.Conv2d(f * 4, f * 4, 4, 2, 1, bias=False)
        self.bn2_1 = nn.BatchNorm2d(f * 4, affine=True)
        self.conv3_0 = nn.Conv2d(f * 4, f * 8, 3, 1, 1, bias=False)
        self.bn3_0 = nn.BatchNorm2d(f * 8, affine=True)
        self.conv3_1 = nn.Conv2d(f * 8, f * 8, 4, 2, 1, bias=False)
        self.bn3_1 = nn.BatchNorm2d(f * 8, affine=True)
        self.conv4_0 = nn.Conv2d(f * 8, f * 8, 3, 1, 1, bias=False)
        self.bn4_0 = nn.BatchNorm2d(f * 8, affine=True)
        self.conv4_1 = nn.Conv2d(f * 8, f * 8, 4, 2, 1, bias=False)
        self.bn4_1 = nn.BatchNorm2d(f * 8, affine=True)
        side = input_size // 32
        self.linear1 = nn.Linear(f * 8 * side * side, 100)
        self.linear2 = nn.Linear(100, 1)
        self.lrelu = nn.LeakyReLU(0.2, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A logit per image, shape (N, 1), for crops of `input_size` px."""
        act = self.lrelu
        feat = act(self.conv0_0(x))
        feat = act(self.bn0_1(self.conv0_1(feat)))  # /2
        feat = act(self.bn1_0(self.conv1_0(feat)))
        feat = act(self.bn1_1(self.conv1_1(feat)))  # /4
        feat = act(self.bn2_0(self.conv2_0(feat)))
        feat = act(self.bn2_1(self.conv2_1(feat)))  # /8
        feat = act(self.bn3_0(self.conv3_0(feat)))
        feat = act(self.bn3_1(self.conv3_1(feat)))  # /16
        feat = act(self.bn4_0(self.conv4_0(feat)))
        feat = act(self.bn4_1(self.conv4_1(feat)))  # /32
        # flatten, not view: a channels_last tensor has no (N, C*H*W) view; the order is C, H, W either way
        feat = act(self.linear1(feat.flatten(1)))
        return self.linear2(feat)
