"""The GAN objectives, on D's logits (computed in fp32 whatever the autocast).
Each is a pair of plain functions: D's loss of (D(x), D(G(z))), and G's
adversarial term of (D(x) or None, D(G(z))). Logits may be one per image or
one per pixel (the U-Net D): every mean is over all of them.

bce, the paper's: D minimises -log D(x) - log(1 - D(G(z))), G minimises
-log D(G(z)). linear, leftthomas/SRGAN's: D minimises 1 - D(x) + D(G(z)),
G minimises 1 - D(G(z)). D(.) is the sigmoid of the logit.

relativistic, ESRGAN's relativistic average GAN (Wang et al. 2018, after
Jolicoeur-Martineau 2018), on logits C: D minimises the mean of
BCE(C(x) - E[C(G(z))], 1) and BCE(C(G(z)) - E[C(x)], 0); G the same with the
targets swapped, so its term needs D(x) too (the step computes it under the
updated D, without gradient). In D's loss each mean E[.] is a constant, as
BasicSR's ESRGANModel (which trained the published weights) takes it: the
gradient reaches D through C(x) in the first half and C(G(z)) in the second."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# softplus(-l) = -log sigmoid(l) (BCE toward 1), softplus(l) = -log(1 - sigmoid(l))
# (BCE toward 0), computed stably.


def bce_d(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    return F.softplus(-real.float()).mean() + F.softplus(fake.float()).mean()


def bce_g(real: torch.Tensor | None, fake: torch.Tensor) -> torch.Tensor:
    return F.softplus(-fake.float()).mean()


def linear_d(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    return 1 - torch.sigmoid(real.float()).mean() + torch.sigmoid(fake.float()).mean()


def linear_g(real: torch.Tensor | None, fake: torch.Tensor) -> torch.Tensor:
    return 1 - torch.sigmoid(fake.float()).mean()


def relativistic_d(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    real, fake = real.float(), fake.float()
    toward_real = F.softplus(-(real - fake.detach().mean())).mean()
    toward_fake = F.softplus(fake - real.detach().mean()).mean()
    return (toward_real + toward_fake) / 2


def relativistic_g(real: torch.Tensor | None, fake: torch.Tensor) -> torch.Tensor:
    assert real is not None  # needs_real: the G step passes D(x) under the updated D
    real, fake = real.float(), fake.float()
    return (F.softplus(real - fake.mean()).mean() + F.softplus(-(fake - real.mean())).mean()) / 2


@dataclass(frozen=True)
class Objective:
    d_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (D(x), D(G(z))) -> D's loss
    g_loss: Callable[[torch.Tensor | None, torch.Tensor], torch.Tensor]  # (D(x) or None, D(G(z))) -> G's term
    needs_real: bool  # whether g_loss reads D(x)


OBJECTIVES = {
    "bce": Objective(bce_d, bce_g, needs_real=False),
    "linear": Objective(linear_d, linear_g, needs_real=False),
    "relativistic": Objective(relativistic_d, relativistic_g, needs_real=True),
}
