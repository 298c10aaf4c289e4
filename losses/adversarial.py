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
gradient reaches D through C(x) in the first half and C(G(z)) in the second.

hinge (Lim & Ye 2017; Miyato et al. 2018 with spectral norm): D minimises
E[max(0, 1 - C(x))] + E[max(0, 1 + C(G(z)))], G minimises -E[C(G(z))].

lsgan (Mao et al. 2017, a = 0, b = c = 1): D minimises E[(C(x) - 1)^2] +
E[C(G(z))^2], G minimises E[(C(G(z)) - 1)^2]; without the paper's factor 1/2,
as BasicSR's GANLoss, so a weight means what it means there.

Each objective also says how a logit reads as the logged score (d_score =
D(x), g_score = D(G(z))): the sigmoid for the logistic ones and hinge (whose
boundary is 0), the output itself for lsgan, which is trained toward 1 and 0."""

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


def hinge_d(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    return F.relu(1 - real.float()).mean() + F.relu(1 + fake.float()).mean()


def hinge_g(real: torch.Tensor | None, fake: torch.Tensor) -> torch.Tensor:
    return -fake.float().mean()


def lsgan_d(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    return (real.float() - 1).square().mean() + fake.float().square().mean()


def lsgan_g(real: torch.Tensor | None, fake: torch.Tensor) -> torch.Tensor:
    return (fake.float() - 1).square().mean()


def output_itself(logit: torch.Tensor) -> torch.Tensor:
    return logit


def r1_penalty(real_logit: torch.Tensor, real: torch.Tensor, scaler: torch.amp.GradScaler) -> torch.Tensor:
    """R1 (Mescheder et al. 2018): the mean over the images of |grad_x C(x)|^2,
    where C(x) is an image's logit (the mean of its logits, for a D with one
    per pixel or patch, so that the weight does not depend on the crop). The
    gradient keeps its graph (create_graph), for D's backward through it.
    Under fp16 it is taken of the scaled logit and unscaled after, as
    PyTorch's AMP recipe for gradient penalties, so that it does not underflow."""
    scale = scaler.get_scale() if scaler.is_enabled() else 1.0
    per_image = real_logit.float().flatten(1).mean(1) if real_logit.dim() > 1 else real_logit.float()
    (grad,) = torch.autograd.grad(per_image.sum() * scale, real, create_graph=True)
    return (grad.float() / scale).square().flatten(1).sum(1).mean()


@dataclass(frozen=True)
class Objective:
    d_loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (D(x), D(G(z))) -> D's loss
    g_loss: Callable[[torch.Tensor | None, torch.Tensor], torch.Tensor]  # (D(x) or None, D(G(z))) -> G's term
    needs_real: bool  # whether g_loss reads D(x)
    score: Callable[[torch.Tensor], torch.Tensor] = torch.sigmoid  # a logit as the logged D(.)


OBJECTIVES = {
    "bce": Objective(bce_d, bce_g, needs_real=False),
    "linear": Objective(linear_d, linear_g, needs_real=False),
    "relativistic": Objective(relativistic_d, relativistic_g, needs_real=True),
    "hinge": Objective(hinge_d, hinge_g, needs_real=False),
    "lsgan": Objective(lsgan_d, lsgan_g, needs_real=False, score=output_itself),
}
