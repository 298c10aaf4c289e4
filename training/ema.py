"""An exponential moving average of the generator's weights (as BasicSR's
net_g_ema): smoother than the raw weights, which a GAN keeps pushing around."""

from __future__ import annotations

import copy

import torch
from torch import nn


class GeneratorEMA:
    def __init__(self, generator: nn.Module, decay: float):
        self.decay = decay
        self.model = copy.deepcopy(generator).eval().requires_grad_(False)

    @torch.no_grad()
    def update(self, generator: nn.Module) -> None:
        for average, current in zip(self.model.parameters(), generator.parameters(), strict=True):
            average.lerp_(current.detach(), 1 - self.decay)
        for kept, latest in zip(self.model.buffers(), generator.buffers(), strict=True):
            kept.copy_(latest)  # BN statistics: the latest, as BasicSR does
