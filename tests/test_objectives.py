"""The GAN objectives against their formulas written here with
torch.nn.functional, and one whole gan_step per discriminator, objective and
update mode against a plain step written here in the style of the
yardsticks (../shared/bench/yardstick_esrgan.py): same weights, batch and
optimizers, the same weights after the step."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from conftest import loss_without_vgg, step_parts
from srgan.losses import OBJECTIVES
from srgan.models import Discriminator, Generator
from srgan.models.discriminator_patchgan import PatchGANDiscriminatorSN
from srgan.models.discriminator_unet import UNetDiscriminatorSN
from srgan.models.discriminator_vgg import VGGStyleDiscriminator
from srgan.training import gan_step

# Hand-picked logits: one per image (srgan, vgg) and one per pixel (unet).
REAL = torch.tensor([2.0, -0.5, 0.25, 3.0])
FAKE = torch.tensor([-1.0, 0.75, -2.5, 0.1])
REAL_PIXELS = torch.tensor([[[[1.5, -0.25], [0.0, 2.0]]], [[[-1.0, 0.5], [3.0, -2.0]]]])
FAKE_PIXELS = torch.tensor([[[[-0.5, 0.25], [1.0, -3.0]]], [[[0.0, -1.5], [2.5, 0.75]]]])


KINDS = ["bce", "linear", "relativistic", "hinge", "lsgan"]


def bce(logits, target):
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, float(target)))


def reference(kind, real, fake):
    """(D's loss, G's adversarial term), as the papers write them; in the
    relativistic D loss, each mean is a constant (BasicSR's ESRGANModel)."""
    if kind == "bce":
        return bce(real, 1) + bce(fake, 0), bce(fake, 1)
    if kind == "linear":
        return 1 - torch.sigmoid(real).mean() + torch.sigmoid(fake).mean(), 1 - torch.sigmoid(fake).mean()
    if kind == "hinge":  # Lim & Ye 2017
        return torch.clamp(1 - real, min=0).mean() + torch.clamp(1 + fake, min=0).mean(), -fake.mean()
    if kind == "lsgan":  # Mao et al. 2017, a = 0, b = c = 1, without the 1/2 (BasicSR's)
        d = F.mse_loss(real, torch.ones_like(real)) + F.mse_loss(fake, torch.zeros_like(fake))
        return d, F.mse_loss(fake, torch.ones_like(fake))
    d = (bce(real - fake.detach().mean(), 1) + bce(fake - real.detach().mean(), 0)) / 2
    g = (bce(real.detach() - fake.mean(), 0) + bce(fake - real.detach().mean(), 1)) / 2
    return d, g


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("real, fake", [(REAL, FAKE), (REAL_PIXELS, FAKE_PIXELS)], ids=["per-image", "per-pixel"])
def test_each_objective_is_its_formula_in_value_and_gradient(kind, real, fake):
    objective = OBJECTIVES[kind]
    leaves = [t.clone().requires_grad_(True) for t in (real, fake, real, fake)]
    d_ours, d_ref = objective.d_loss(leaves[0], leaves[1]), reference(kind, leaves[2], leaves[3])[0]
    assert torch.allclose(d_ours, d_ref, rtol=1e-6, atol=1e-7)
    ours_grads = torch.autograd.grad(d_ours, leaves[:2])
    ref_grads = torch.autograd.grad(d_ref, leaves[2:])
    for a, b in zip(ours_grads, ref_grads, strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-8)
    fake_a, fake_b = fake.clone().requires_grad_(True), fake.clone().requires_grad_(True)
    g_ours = objective.g_loss(real if objective.needs_real else None, fake_a)
    g_ref = reference(kind, real, fake_b)[1]
    assert torch.allclose(g_ours, g_ref, rtol=1e-6, atol=1e-7)
    assert torch.allclose(
        torch.autograd.grad(g_ours, fake_a)[0], torch.autograd.grad(g_ref, fake_b)[0], rtol=1e-6, atol=1e-8
    )


def test_hand_computed_values():
    """A few numbers worked out by hand, so that the formulas above are not
    only checked against each other: logits 0 give log 2 everywhere."""
    zeros = torch.zeros(3)
    assert OBJECTIVES["bce"].d_loss(zeros, zeros).item() == pytest.approx(2 * 0.6931471805599453)
    assert OBJECTIVES["relativistic"].d_loss(zeros, zeros).item() == pytest.approx(0.6931471805599453)
    assert OBJECTIVES["linear"].d_loss(zeros, zeros).item() == pytest.approx(1.0)
    # real 1, fake -1: C(x) - E[C(G(z))] = 2, C(G(z)) - E[C(x)] = -2: D's loss log(1 + e^-2)
    d = OBJECTIVES["relativistic"].d_loss(torch.ones(2), -torch.ones(2)).item()
    assert d == pytest.approx(0.12692801104297263)
    g = OBJECTIVES["relativistic"].g_loss(torch.ones(2), -torch.ones(2)).item()
    assert g == pytest.approx(2.1269280110429727)
    # hinge: D at real 1, fake -1 has met both margins (0); at 0, 0 it pays 1 + 1
    assert OBJECTIVES["hinge"].d_loss(torch.ones(2), -torch.ones(2)).item() == 0.0
    assert OBJECTIVES["hinge"].d_loss(zeros, zeros).item() == 2.0
    assert OBJECTIVES["hinge"].g_loss(None, torch.tensor([0.5, -1.5])).item() == 0.5
    # lsgan: real 1 and fake 0 are its targets; fake 0 costs G (0 - 1)^2 = 1
    assert OBJECTIVES["lsgan"].d_loss(torch.ones(2), torch.zeros(2)).item() == 0.0
    assert OBJECTIVES["lsgan"].d_loss(torch.tensor([0.5]), torch.tensor([0.5])).item() == 0.5
    assert OBJECTIVES["lsgan"].g_loss(None, zeros).item() == 1.0


def test_scores_read_each_objective_s_output_as_d():
    """d_score and g_score: the sigmoid of the logit for the logistic
    objectives and hinge (boundary 0), the output itself for lsgan (trained
    toward 1 and 0)."""
    logit = torch.tensor([2.0, -1.0])
    for kind in ("bce", "linear", "relativistic", "hinge"):
        torch.testing.assert_close(OBJECTIVES[kind].score(logit), torch.sigmoid(logit))
    torch.testing.assert_close(OBJECTIVES["lsgan"].score(logit), logit)


# ---- a whole step against a plain one ---------------------------------------------------

WIDTH, CROP = 4, 32
DISCRIMINATORS = {
    "srgan": lambda: Discriminator(WIDTH),
    "vgg": lambda: VGGStyleDiscriminator(WIDTH, CROP),
    "unet": lambda: UNetDiscriminatorSN(WIDTH),
    "patchgan": lambda: PatchGANDiscriminatorSN(WIDTH, 2),
}
W_IMAGE, W_ADV = 1.0, 0.5


def plain_step(net_g, net_d, opt_g, opt_d, lq, gt, kind):
    """The alternating update written out, as the yardsticks do, in srgan's
    order (D, then G under the updated D)."""
    output = net_g(lq)
    # optimize net_d
    opt_d.zero_grad()
    real_d_pred = net_d(gt)
    fake_d_pred = net_d(output.detach())
    if kind == "bce":
        l_d = bce(real_d_pred, 1) + bce(fake_d_pred, 0)
    elif kind == "linear":
        l_d = 1 - torch.sigmoid(real_d_pred).mean() + torch.sigmoid(fake_d_pred).mean()
    elif kind == "hinge":
        l_d = F.relu(1 - real_d_pred).mean() + F.relu(1 + fake_d_pred).mean()
    elif kind == "lsgan":
        l_d = ((real_d_pred - 1) ** 2).mean() + (fake_d_pred**2).mean()
    else:
        l_d = (
            bce(real_d_pred - torch.mean(fake_d_pred.detach()), 1)
            + bce(fake_d_pred - torch.mean(real_d_pred.detach()), 0)
        ) / 2
    l_d.backward()
    opt_d.step()
    # optimize net_g
    for p in net_d.parameters():
        p.requires_grad = False
    opt_g.zero_grad()
    if kind == "relativistic":
        real_d_pred = net_d(gt).detach()
    fake_g_pred = net_d(output)
    if kind == "bce":
        l_g_gan = bce(fake_g_pred, 1)
    elif kind == "linear":
        l_g_gan = 1 - torch.sigmoid(fake_g_pred).mean()
    elif kind == "hinge":
        l_g_gan = -fake_g_pred.mean()
    elif kind == "lsgan":
        l_g_gan = ((fake_g_pred - 1) ** 2).mean()
    else:
        l_g_gan = (bce(real_d_pred - torch.mean(fake_g_pred), 0) + bce(fake_g_pred - torch.mean(real_d_pred), 1)) / 2
    l_g_total = W_IMAGE * F.mse_loss(output, gt) + W_ADV * l_g_gan
    l_g_total.backward()
    opt_g.step()
    for p in net_d.parameters():
        p.requires_grad = True
    return l_d.detach(), l_g_total.detach()


def sgd(module):
    # plain SGD: the weights after the step are the gradients, undistorted
    # (Adam's first step would turn rounding noise in a zero gradient into a full step)
    return torch.optim.SGD(module.parameters(), lr=0.1)


@pytest.mark.parametrize("update", ["retain_graph", "detach"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d_kind", list(DISCRIMINATORS))
def test_gan_step_equals_the_plain_step(d_kind, kind, update):
    torch.manual_seed(0)
    g, d = Generator(2, 1, 4, norm="none"), DISCRIMINATORS[d_kind]()
    g_ref, d_ref = copy.deepcopy(g), copy.deepcopy(d)
    g_0, d_0 = copy.deepcopy(g), copy.deepcopy(d)
    loss = loss_without_vgg(image=W_IMAGE, adversarial=W_ADV, perceptual=0.0)
    parts = step_parts(g, d, loss, kind, optimizer=sgd, channels_last=False, update=update)
    gen = torch.Generator().manual_seed(1)
    gt = torch.rand(3, 3, CROP, CROP, generator=gen)
    lq = F.interpolate(gt, scale_factor=0.5, mode="bicubic").clamp(0, 1)

    stats = gan_step(parts, lq, gt)
    l_d, l_g = plain_step(g_ref, d_ref, sgd(g_ref), sgd(d_ref), lq, gt, kind)

    assert stats["d_loss"].item() == pytest.approx(l_d.item(), rel=1e-5)
    assert stats["g_loss"].item() == pytest.approx(l_g.item(), rel=1e-5)
    for net, ref, start in ((d, d_ref, d_0), (g, g_ref, g_0)):
        for (name, a), b, before in zip(
            net.state_dict().items(), ref.state_dict().values(), start.state_dict().values(), strict=True
        ):
            # fp32 rounding of the gradient sums, against the size of the step itself
            step = (b.float() - before.float()).abs().max().item()
            assert (a.float() - b.float()).abs().max().item() <= 1e-3 * step + 1e-7, (type(net).__name__, name)
        moved = [(p - p0).abs().max().item() for p, p0 in zip(net.parameters(), start.parameters(), strict=True)]
        assert max(moved) > 1e-4  # the step moved them: the comparison is not of untouched weights


def test_the_relativistic_g_step_judges_real_images_with_the_updated_d():
    """G's relativistic term compares D(G(z)) with D(x), both under the D
    just updated: gan_step's adversarial term is that value, and the
    generator moves by its gradient; D(x) from before optimizer_d.step()
    would give another value and another step."""
    torch.manual_seed(0)
    g, d = Generator(2, 1, 4, norm="none"), Discriminator(WIDTH)
    loss = loss_without_vgg(image=0.0, adversarial=1.0, perceptual=0.0)
    d0 = copy.deepcopy(d)
    g0 = copy.deepcopy(g)
    parts = step_parts(g, d, loss, "relativistic", optimizer=sgd, channels_last=False)
    gt = torch.rand(2, 3, CROP, CROP, generator=torch.Generator().manual_seed(3))
    lq = F.interpolate(gt, scale_factor=0.5, mode="bicubic").clamp(0, 1)
    stats = gan_step(parts, lq, gt)
    d.requires_grad_(False)
    d0.requires_grad_(False)

    def g_after(real_logit):
        """g0 after one SGD step on the relativistic term against `real_logit`: the term and the weights."""
        fake = g0(lq)
        term = OBJECTIVES["relativistic"].g_loss(real_logit, d(fake))
        grads = torch.autograd.grad(term, list(g0.parameters()))
        return term.detach(), [(p - 0.1 * grad).detach() for p, grad in zip(g0.parameters(), grads, strict=True)]

    fresh, fresh_weights = g_after(d(gt))
    stale, stale_weights = g_after(d0(gt))
    assert abs(stale.item() - fresh.item()) > 1e-3  # the two D(x) differ enough to tell apart
    assert stats["adversarial"].item() == pytest.approx(fresh.item(), rel=1e-5)
    assert stats["g_loss"].item() == pytest.approx(fresh.item(), rel=1e-5)
    for p, want in zip(g.parameters(), fresh_weights, strict=True):
        torch.testing.assert_close(p.detach(), want, rtol=0, atol=1e-6)
    assert max((a - b).abs().max().item() for a, b in zip(fresh_weights, stale_weights, strict=True)) > 1e-4
