"""The SRGAN discriminator (Ledig et al. 2017, fig. 4), and the one function
that builds the discriminator a config names (the others have a file each:
discriminator_vgg.py, discriminator_unet.py, discriminator_patchgan.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from srgan.models.discriminator_patchgan import PatchGANDiscriminatorSN
from srgan.models.discriminator_unet import UNetDiscriminatorSN
from srgan.models.discriminator_vgg import VGGStyleDiscriminator

if TYPE_CHECKING:
    from srgan.configs.schema import Config


def build_discriminator(config: Config) -> nn.Module:
    """The discriminator gan.discriminator names, model.d_channels wide (the
    config loader has checked that data.crop_size suits it)."""
    kind, width = config.gan.discriminator, config.model.d_channels
    if kind == "vgg":
        return VGGStyleDiscriminator(width, config.data.crop_size)
    if kind == "unet":
        return UNetDiscriminatorSN(width)
    if kind == "patchgan":
        return PatchGANDiscriminatorSN(width, config.gan.patchgan_layers)
    return Discriminator(width)


class Discriminator(nn.Module):
    """Eight 3x3 convs, 64 to 512 channels, stride 2 on every second; BN on
    all but the first; LeakyReLU(0.2); then dense 1024 and one logit per
    image. Global average pooling before the dense layers (as the widely
    used PyTorch port) lets it judge crops of any size."""

    def __init__(self, channels: int = 64):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for i, (c_out, stride) in enumerate([(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1), (8, 2)]):
            c_out *= channels
            layers.append(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1))
            if i > 0:
                layers.append(nn.BatchNorm2d(c_out))
            layers.append(nn.LeakyReLU(0.2))
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            GlobalAveragePool(),
            nn.Flatten(),
            nn.Linear(c_in, 1024),
            nn.LeakyReLU(0.2),
            nn.Linear(1024, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """A logit per image, shape (N,): sigmoid of it is D(x)."""
        return self.classifier(self.features(x)).squeeze(1)


class GlobalAveragePool(nn.Module):
    """The mean over height and width: AdaptiveAvgPool2d(1)'s function, whose
    CUDA backward has no deterministic implementation (mean's has)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3), keepdim=True)
