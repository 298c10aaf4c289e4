"""The GAN objectives, on D's logits (computed in fp32 whatever the autocast).

bce, the paper's: D minimises -log D(x) - log(1 - D(G(z))), G minimises
-log D(G(z)). linear, leftthomas/SRGAN's: D minimises 1 - D(x) + D(G(z)),
G minimises 1 - D(G(z)). D(.) is the sigmoid of the logit."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def discriminator_loss(real_logit: torch.Tensor, fake_logit: torch.Tensor, kind: str) -> torch.Tensor:
    real_logit, fake_logit = real_logit.float(), fake_logit.float()
    if kind == "linear":
        return 1 - torch.sigmoid(real_logit).mean() + torch.sigmoid(fake_logit).mean()
    # softplus(-l) = -log sigmoid(l), softplus(l) = -log(1 - sigmoid(l)), stably.
    return F.softplus(-real_logit).mean() + F.softplus(fake_logit).mean()


def generator_adversarial_loss(fake_logit: torch.Tensor, kind: str) -> torch.Tensor:
    fake_logit = fake_logit.float()
    if kind == "linear":
        return 1 - torch.sigmoid(fake_logit).mean()
    return F.softplus(-fake_logit).mean()
