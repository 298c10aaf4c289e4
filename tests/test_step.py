"""The alternating D/G update: what it computes, what it does not compute,
and the bug of the widely copied loop that it avoids."""

import copy

import pytest
import torch

from conftest import loss_without_vgg, step_parts
from srgan.losses import OBJECTIVES
from srgan.models import Discriminator, Generator, resolve_runtime
from srgan.training import TrainingParts, gan_step
from srgan.training.step import generator_step


def make_parts(update="retain_graph", d_loss="bce", seed=0) -> TrainingParts:
    torch.manual_seed(seed)
    g, d = Generator(2, 1, 8), Discriminator(8)
    return step_parts(g, d, loss_without_vgg(image=1.0, tv=1e-4), d_loss, update=update)


def batches(n=3, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.rand(2, 3, 12, 12, generator=gen), torch.rand(2, 3, 24, 24, generator=gen)) for _ in range(n)]


def test_retain_graph_and_detach_reach_the_same_parameters():
    a, b = make_parts("retain_graph"), make_parts("detach")
    for lr, hr in batches():
        sa, sb = gan_step(a, lr, hr), gan_step(b, lr, hr)
        assert torch.allclose(sa["g_loss"], sb["g_loss"], rtol=1e-6, atol=1e-7)
    for net in ("generator", "discriminator"):
        for pa, pb in zip(getattr(a, net).parameters(), getattr(b, net).parameters(), strict=True):
            assert torch.allclose(pa, pb, rtol=1e-5, atol=1e-7), net


def test_the_common_loop_order_raises_the_inplace_error_and_ours_does_not():
    """leftthomas/SRGAN: optD.step() between D(G(z)) and g_loss.backward()."""
    parts = make_parts("retain_graph", "linear")
    G, D, crit = parts.generator, parts.discriminator, parts.criterion
    lr, hr = batches(1)[0]
    fake = G(lr)
    D.zero_grad()
    real_out = torch.sigmoid(D(hr)).mean()
    fake_logit = D(fake)
    d_loss = 1 - real_out + torch.sigmoid(fake_logit).mean()
    d_loss.backward(retain_graph=True)
    parts.optimizer_d.step()
    G.zero_grad()
    g_loss, _ = crit(fake, hr, fake_logit)  # the stale D(G(z))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        g_loss.backward()
    stats = gan_step(make_parts("retain_graph", "linear"), lr, hr)
    assert torch.isfinite(stats["g_loss"])


def test_one_generator_forward_and_backward_per_step():
    """No extra G forward for logging, and the D step's backward never runs
    through G (its gradients would be thrown away)."""
    for update in ("retain_graph", "detach"):
        parts = make_parts(update)
        calls = {"forward": 0, "backward": 0}
        parts.generator.register_forward_hook(
            lambda *_, calls=calls: calls.__setitem__("forward", calls["forward"] + 1)
        )
        # fires each time a backward computes the gradient of G's first weight
        parts.generator.head[0].weight.register_hook(
            lambda g, calls=calls: calls.__setitem__("backward", calls["backward"] + 1)
        )
        for lr, hr in batches(2):
            gan_step(parts, lr, hr)
        assert calls == {"forward": 2, "backward": 2}, update


def test_d_gradients_come_from_d_loss_alone():
    """The G step leaves D's gradients as the D step made them."""
    parts = make_parts()
    lr, hr = batches(1)[0]
    G0, D0 = copy.deepcopy(parts.generator), copy.deepcopy(parts.discriminator)
    gan_step(parts, lr, hr)
    fake = G0(lr).detach()
    d_loss = OBJECTIVES["bce"].d_loss(D0(hr), D0(fake))
    expected = torch.autograd.grad(d_loss, list(D0.parameters()))
    for got, want in zip((p.grad for p in parts.discriminator.parameters()), expected, strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-7)


def test_g_step_sees_the_updated_discriminator():
    parts = make_parts()
    lr, hr = batches(1)[0]
    G0 = copy.deepcopy(parts.generator)
    stats = gan_step(parts, lr, hr)
    fake = G0(lr)
    # D after its update, in train mode as the step runs it
    adv_new = OBJECTIVES["bce"].g_loss(None, parts.discriminator(fake))
    assert stats["adversarial"].item() == pytest.approx(adv_new.item(), rel=1e-4, abs=1e-5)


def test_linear_loss_and_scores_agree():
    stats = gan_step(make_parts(d_loss="linear"), *batches(1)[0])
    assert stats["d_loss"].item() == pytest.approx(1 - stats["d_score"].item() + stats["g_score"].item(), abs=1e-6)
    assert 0 < stats["d_score"].item() < 1 and 0 < stats["g_score"].item() < 1
    assert all(v.dim() == 0 and not v.requires_grad for v in stats.values())


@pytest.mark.parametrize("image_only", [True, False])
def test_generator_step_leaves_the_discriminator_alone(image_only):
    """The G-only step (pretraining, SRResNet) moves every weight of G and
    not one bit of D: parameters, BN statistics and gradients."""
    parts = make_parts()
    d_before = copy.deepcopy(parts.discriminator.state_dict())
    g_before = copy.deepcopy(parts.generator.state_dict())
    stats = generator_step(parts, *batches(1)[0], image_only=image_only)
    assert (set(stats) == {"g_loss", "image"}) if image_only else ("adversarial" not in stats)
    d_after = parts.discriminator.state_dict()
    assert all(torch.equal(d_after[k], v) for k, v in d_before.items())
    assert all(p.grad is None for p in parts.discriminator.parameters())
    moved = {name: not torch.equal(p, g_before[name]) for name, p in parts.generator.named_parameters()}
    assert all(moved.values()), [name for name, changed in moved.items() if not changed]


def test_bf16_autocast_step_is_finite():
    parts = make_parts()
    parts.runtime = resolve_runtime("cpu", "bf16")
    stats = gan_step(parts, *batches(1)[0])
    assert all(torch.isfinite(v) for v in stats.values())
