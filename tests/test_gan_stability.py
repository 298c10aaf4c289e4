"""The knobs that keep a GAN stable: the R1 penalty (gan.r1, lazy every
gan.r1_every steps), gradient clipping (train.grad_clip) and the adversarial
warm-up (gan.warmup_steps). Each against its formula written here, one whole
gan_step against a plain step written here, and whole runs: resumed to the
bit, under two ranks, refused when mis-set."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_refused, interrupt_at, loss_without_vgg, set_args, step_parts, tiny_overrides
from srgan.configs import load_config
from srgan.losses import r1_penalty
from srgan.models import Discriminator, Generator
from srgan.models.discriminator_patchgan import PatchGANDiscriminatorSN
from srgan.training import TrainingParts, gan_step, train
from srgan.training.state import load_checkpoint
from srgan.training.step import generator_step
from test_distributed import two_ranks_and_one
from test_reproducibility import assert_same_checkpoints

NO_SCALER = torch.amp.GradScaler("cpu", enabled=False)
CROP, W_ADV = 32, 0.5


# ---- R1 against its formula -------------------------------------------------------


def test_r1_of_a_linear_critic_is_its_weights_squared_norm():
    """C(x) = <w, x> has gradient w at every x: R1 = |w|^2, whatever x."""
    w = torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(0))
    x = torch.rand(4, 3, 8, 8).requires_grad_(True)
    logit = (x * w).flatten(1).sum(1)
    assert r1_penalty(logit, x, NO_SCALER).item() == pytest.approx(w.square().sum().item(), rel=1e-6)


def test_r1_of_a_per_pixel_critic_differentiates_each_image_s_mean_logit():
    """Logits a * x[:, 0] per pixel: an image's verdict is their mean, whose
    gradient is a / (H W) on channel 0, so R1 = H W (a / (H W))^2 = a^2 / (H W)."""
    a, h, w = 3.0, 4, 6
    x = torch.rand(2, 3, h, w).requires_grad_(True)
    assert r1_penalty(a * x[:, :1], x, NO_SCALER).item() == pytest.approx(a**2 / (h * w), rel=1e-6)


def test_r1_under_a_loss_scaler_is_the_unscaled_penalty():
    """fp16's scaler (enabled here on the CPU, scale 2^16): the gradient is
    taken of the scaled logit and divided back, so the penalty is the same."""
    w = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(1))
    x = torch.rand(2, 3, 4, 4).requires_grad_(True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    penalty = r1_penalty((x * w).flatten(1).sum(1), x, scaler)
    assert penalty.item() == pytest.approx(w.square().sum().item(), rel=1e-6)


# ---- one gan_step against a plain one -----------------------------------------------


def bce(logits, target):
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, float(target)))


def clip_by_hand(network, limit):
    """Scale the gradients to total norm `limit` where above it; the norm before."""
    norm = torch.sqrt(sum(p.grad.square().sum() for p in network.parameters() if p.grad is not None))
    if limit and norm > limit:
        for p in network.parameters():
            if p.grad is not None:
                p.grad.mul_(limit / norm)
    return norm.item()


def plain_step(g, d, lq, gt, r1=0.0, clip=0.0, adversarial=W_ADV):
    """bce, D then G under the updated D, plain SGD; `r1`: the penalty's
    weight as applied (gan.r1 times r1_every on a lazy step), on each image's
    mean logit. Returns the norms before clipping and the R1 penalty."""
    opt_g, opt_d = sgd(g), sgd(d)
    output = g(lq)
    opt_d.zero_grad()
    real = gt.clone().requires_grad_(True)
    real_pred, fake_pred = d(real), d(output.detach())
    l_d = bce(real_pred, 1) + bce(fake_pred, 0)
    (grad,) = torch.autograd.grad(real_pred.reshape(len(gt), -1).mean(1).sum(), real, create_graph=True)
    penalty = grad.square().sum(dim=(1, 2, 3)).mean()
    (l_d + r1 / 2 * penalty).backward()
    d_norm = clip_by_hand(d, clip)
    opt_d.step()
    d.requires_grad_(False)
    opt_g.zero_grad()
    l_g = F.mse_loss(output, gt) + adversarial * bce(d(output), 1)
    l_g.backward()
    g_norm = clip_by_hand(g, clip)
    opt_g.step()
    d.requires_grad_(True)
    return {"d_grad_norm": d_norm, "g_grad_norm": g_norm, "r1": penalty.item()}


def sgd(network):
    return torch.optim.SGD(network.parameters(), lr=0.1)  # weights after the step = the gradients, undistorted


def networks(d_kind):
    torch.manual_seed(0)
    d = PatchGANDiscriminatorSN(4, 2) if d_kind == "patchgan" else Discriminator(4)
    return Generator(2, 1, 4, norm="none"), d


def parts_of(g, d, **settings) -> TrainingParts:
    loss = loss_without_vgg(image=1.0, adversarial=W_ADV, perceptual=0.0)
    return step_parts(g, d, loss, optimizer=sgd, channels_last=False, **settings)


def batch():
    gt = torch.rand(3, 3, CROP, CROP, generator=torch.Generator().manual_seed(1))
    return F.interpolate(gt, scale_factor=0.5, mode="bicubic").clamp(0, 1), gt


def assert_same_weights(ours, ref, start):
    for (name, a), b, before in zip(
        ours.state_dict().items(), ref.state_dict().values(), start.state_dict().values(), strict=True
    ):
        step = (b.float() - before.float()).abs().max().item()
        # fp32 rounding (a BatchNorm-cancelled bias barely moves: the absolute floor)
        assert (a.float() - b.float()).abs().max().item() <= 1e-3 * step + 1e-6, (type(ours).__name__, name)


# (settings of the step, gan_steps_before, what the plain step applies)
CASES = {
    "r1-on-its-step": ({"r1": 2.0, "r1_every": 4}, 8, {"r1": 2.0 * 4}),
    "r1-between-its-steps": ({"r1": 2.0, "r1_every": 4}, 9, {}),
    "r1-every-step": ({"r1": 0.5, "r1_every": 1}, 3, {"r1": 0.5}),
    "clip-clips": ({"grad_clip": 0.01}, 0, {"clip": 0.01}),
    "clip-above-the-norms": ({"grad_clip": 1e6}, 0, {}),
    "warmup-half-way": ({"warmup_steps": 4}, 1, {"adversarial": W_ADV * 2 / 4}),
    "warmup-over": ({"warmup_steps": 4}, 10, {}),
}


@pytest.mark.parametrize("d_kind", ["patchgan", "srgan"])
@pytest.mark.parametrize("case", list(CASES))
def test_gan_step_equals_the_plain_step_with_each_knob(d_kind, case):
    settings, before, applied = CASES[case]
    g, d = networks(d_kind)
    g_ref, d_ref, g_0, d_0 = (copy.deepcopy(m) for m in (g, d, g, d))
    lq, gt = batch()

    stats = gan_step(parts_of(g, d, **settings), lq, gt, gan_steps_before=before)
    reference = plain_step(g_ref, d_ref, lq, gt, **applied)

    assert_same_weights(d, d_ref, d_0)
    assert_same_weights(g, g_ref, g_0)
    if "r1" in applied:
        assert stats["r1"].item() == pytest.approx(reference["r1"], rel=1e-5)
    else:
        assert "r1" not in stats  # no penalty computed between its steps
    if "grad_clip" in settings:
        for name in ("g", "d"):
            assert stats[f"{name}_grad_norm"].item() == pytest.approx(reference[f"{name}_grad_norm"], rel=1e-5)
            assert stats[f"{name}_clipped"].item() == (1.0 if "clip" in applied else 0.0)
    else:
        assert "g_grad_norm" not in stats  # no norm computed without clipping


def test_the_warm_up_ramps_the_adversarial_weight_linearly_then_holds():
    """g_loss = image + W_ADV * min(1, (k + 1) / N) * adversarial at GAN step k."""
    for before, factor in ((0, 1 / 4), (1, 2 / 4), (3, 1.0), (40, 1.0)):
        g, d = networks("patchgan")
        stats = gan_step(parts_of(g, d, warmup_steps=4), *batch(), gan_steps_before=before)
        expected = stats["image"] + W_ADV * factor * stats["adversarial"]
        assert stats["g_loss"].item() == pytest.approx(expected.item(), rel=1e-6)


def test_clipping_bounds_the_generator_s_update_in_its_psnr_phase():
    """generator_step (pretraining, SRResNet) clips too: SGD's move is lr x the clipped gradient."""
    g, d = networks("srgan")
    g_0 = copy.deepcopy(g)
    stats = generator_step(parts_of(g, d, grad_clip=1e-3), *batch(), image_only=True)
    assert stats["g_grad_norm"].item() > 1e-3 and stats["g_clipped"].item() == 1.0
    moved = torch.sqrt(sum((p - p0).square().sum() for p, p0 in zip(g.parameters(), g_0.parameters(), strict=True)))
    assert moved.item() == pytest.approx(0.1 * 1e-3, rel=1e-3)


# ---- whole runs --------------------------------------------------------------------

KNOBS = [
    "gan.discriminator=patchgan",
    "gan.patchgan_layers=2",
    "gan.r1=1.0",
    "gan.r1_every=2",
    "gan.warmup_steps=3",
    "train.grad_clip=0.05",
]


def knob_config(photo_dir, run_dir, max_steps):
    """A 2-step PSNR phase, then GAN steps with every knob on; epochs of 2 steps."""
    return load_config(
        "demo",
        tiny_overrides(
            photo_dir, run_dir, *KNOBS, "train.pretrain_steps=2", "train.epochs=5", f"train.max_steps={max_steps}"
        ),
    )


def logged(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("stop", [3, 4], ids=["r1-step", "between-r1-steps"])
def test_a_run_with_every_knob_resumes_to_the_bit(photo_dir, tmp_path, stop):
    whole = train(knob_config(photo_dir, tmp_path / "whole", 6))
    part = interrupt_at(knob_config(photo_dir, tmp_path / "part", 6), stop)
    train(knob_config(photo_dir, part, 6), resume=part)
    assert_same_checkpoints(whole, part)
    rows = logged(whole)
    assert [row["step"] for row in rows if "r1" in row] == [3, 5]  # GAN steps 0 and 2 (after 2 PSNR steps)
    assert all("g_grad_norm" in row for row in rows) and all("d_grad_norm" in row for row in rows[2:])
    assert any(row["g_clipped"] == 1.0 for row in rows)  # 0.05 clips these tiny networks' gradients
    assert [{k: v for k, v in r.items() if k != "images_per_s"} for r in logged(part)] == [
        {k: v for k, v in r.items() if k != "images_per_s"} for r in rows
    ]


def test_r1_under_two_ranks_is_one_process_on_twice_the_batch(photo_dir, tmp_path):
    """DDP with the penalty's double backward: the PatchGAN (no BatchNorm) and
    a generator without it, R1 on every GAN step; two ranks of 2 crops give
    the weights of one process of 4."""
    common = [
        "gan.discriminator=patchgan",
        "gan.patchgan_layers=2",
        "gan.r1=10",
        "gan.r1_every=1",
        "model.norm=none",
        "train.max_steps=3",
        "data.repeat=8",
        "train.lr_schedule.milestones=[]",
    ]
    two, one = two_ranks_and_one(photo_dir, tmp_path, common)
    a, b = load_checkpoint(two), load_checkpoint(one)
    for key in ("generator", "discriminator"):
        for name, tensor in a[key].items():
            assert torch.allclose(tensor, b[key][name], atol=1e-5, rtol=1e-4), (key, name)
    assert [r["r1"] for r in logged(two)] == pytest.approx([r["r1"] for r in logged(one)], rel=1e-4)


@pytest.mark.parametrize(
    "setting, culprit",
    [
        ("gan.r1=-1", "gan.r1: expected 0 (off) or a positive weight, got -1.0"),
        ("gan.r1_every=0", "gan.r1_every: expected at least 1"),
        ("gan.warmup_steps=-5", "gan.warmup_steps: expected 0 (off) or more steps, got -5"),
        ("train.grad_clip=-0.1", "train.grad_clip: expected 0 (off) or a positive gradient norm, got -0.1"),
        ("train.grad_clip=nan", "train.grad_clip: expected a finite number"),
        ("gan.r1=1 train.compile=true", "train.compile: expected false with gan.r1"),
        ("gan.d_loss=wgan", "gan.d_loss: expected one of bce, linear, relativistic, hinge, lsgan"),
    ],
)
def test_a_mis_set_knob_is_refused_naming_it(srgan, photo_dir, tmp_path, setting, culprit):
    result = srgan("train", *set_args(tiny_overrides(photo_dir, tmp_path / "run", *setting.split())))
    assert_refused(result, culprit)
    assert not (tmp_path / "run").exists()
