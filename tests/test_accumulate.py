"""train.accumulate: K micro-batches of B/K sum their gradients into one
optimizer step. Without BatchNorm in the generator (and with a D that judges
each image alone) that is the update of one batch of B; logged values are the
batch's means; and a resumed run still equals the run never stopped."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_refused, interrupt_at, set_args, tiny_overrides
from srgan.configs import load_config
from srgan.models import resolve_runtime
from srgan.training import train
from srgan.training.loop import build_parts
from srgan.training.step import gan_step, generator_step
from test_reproducibility import assert_same_checkpoints

TINY = [
    "model.blocks=2",
    "model.channels=8",
    "model.d_channels=8",
    "model.norm=none",
    "data.crop_size=32",
    "data.batch_size=4",
    "loss.perceptual.weights=none",
    "loss.perceptual.layer=relu2_2",
    "loss.weights.perceptual=0.01",
    "loss.weights.adversarial=0.01",
    "train.precision=fp32",
    "train.device=cpu",
]


def parts_for(accumulate: int, *extra: str):
    config = load_config("demo", [*TINY, f"train.accumulate={accumulate}", *extra])
    torch.manual_seed(0)
    return build_parts(config, resolve_runtime("cpu", "fp32", True))


def batch(seed=1):
    hr = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(seed))
    lr = F.interpolate(hr, scale_factor=0.25, mode="bicubic").clamp(0, 1)
    return lr.contiguous(memory_format=torch.channels_last), hr.contiguous(memory_format=torch.channels_last)


def assert_same_update(a, b, names=("generator", "discriminator")):
    for net in names:
        for (name, pa), pb in zip(getattr(a, net).named_parameters(), getattr(b, net).parameters(), strict=True):
            # the gradients each step summed (still in .grad), to fp32 rounding of sums over other groupings
            scale = pb.grad.abs().max().item()
            assert (pa.grad - pb.grad).abs().max().item() <= 1e-3 * scale + 1e-12, (net, name)
            # and the weights after Adam's step (learning rates 1e-3 and 1e-4)
            assert torch.allclose(pa, pb, rtol=0, atol=1e-6), (net, name)


@pytest.mark.parametrize("image_only", [True, False], ids=["pretraining", "srresnet"])
def test_micro_batches_give_the_update_of_the_whole_batch_generator_alone(image_only):
    whole, micro = parts_for(1), parts_for(2)
    stats_whole = generator_step(whole, *batch(), image_only=image_only)
    stats_micro = generator_step(micro, *batch(), image_only=image_only)
    assert_same_update(whole, micro, ["generator"])
    for name in stats_whole:  # the logged values: means over the micro-batches, the batch's means
        assert stats_micro[name].item() == pytest.approx(stats_whole[name].item(), rel=1e-5), name


@pytest.mark.parametrize("d_kind, update", [("srgan", "retain_graph"), ("vgg", "detach"), ("unet", "retain_graph")])
def test_micro_batches_give_the_update_of_the_whole_batch_gan(d_kind, update):
    """The discriminators in eval mode (running statistics for BatchNorm, the
    stored vectors for spectral norm), where each judges an image alone; in
    train mode their batch statistics (and the U-Net's power iteration per
    forward) make micro-batches differ from the batch, as they would on a
    smaller GPU."""
    extra = [f"gan.discriminator={d_kind}", f"gan.update={update}"]
    whole, micro = parts_for(1, *extra), parts_for(2, *extra)
    for parts in (whole, micro):
        parts.discriminator.eval()
    stats_whole, stats_micro = gan_step(whole, *batch()), gan_step(micro, *batch())
    assert_same_update(whole, micro)
    assert (
        set(stats_whole)
        == set(stats_micro)
        == {"d_loss", "g_loss", "d_score", "g_score", "image", "adversarial", "perceptual", "tv"}
    )
    for name in stats_whole:
        assert stats_micro[name].item() == pytest.approx(stats_whole[name].item(), rel=1e-5), name


@pytest.mark.parametrize("accumulate", [1, 4])
def test_the_generator_keeps_one_micro_batchs_graph_at_a_time(accumulate):
    """One batch: one G forward, whose graph serves both updates. K micro-
    batches: D judges fakes made without a graph, then G runs again with one,
    a micro-batch at a time, so no more than one micro-batch's graph is alive."""
    parts = parts_for(accumulate)
    calls = []
    parts.generator.register_forward_hook(lambda module, args, out: calls.append((args[0].shape[0], out.requires_grad)))
    gan_step(parts, *batch())
    if accumulate == 1:
        assert calls == [(4, True)]
    else:
        assert calls == [(1, False)] * 4 + [(1, True)] * 4


def test_batch_size_must_be_a_multiple_of_accumulate(srgan, tmp_path, photo_dir):
    result = srgan("train", *set_args(tiny_overrides(photo_dir, tmp_path / "a", "train.accumulate=2")))
    assert_refused(result, "data.batch_size: expected a multiple of train.accumulate (2)")
    result = srgan("train", *set_args(tiny_overrides(photo_dir, tmp_path / "b", "train.accumulate=0")))
    assert_refused(result, "train.accumulate: expected at least 1")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def resumable(photo_dir, run_dir):
    """test_reproducibility's run (pretraining, then GAN steps, EMA, a
    milestone; epochs of 2 steps) with 2 micro-batches of 2."""
    return load_config(
        "demo",
        tiny_overrides(
            photo_dir,
            run_dir,
            "train.epochs=10",
            "train.max_steps=5",
            "train.pretrain_steps=2",
            "train.ema_decay=0.5",
            "train.lr_schedule.milestones=[4]",
            "data.batch_size=4",
            "data.repeat=3",
            "train.accumulate=2",
        ),
    )


def test_a_resumed_run_with_accumulation_equals_the_run_never_stopped(photo_dir, tmp_path):
    whole = train(resumable(photo_dir, tmp_path / "whole"))
    part = interrupt_at(resumable(photo_dir, tmp_path / "part"), 3)  # a GAN step inside an epoch
    train(resumable(photo_dir, part), resume=part)
    assert_same_checkpoints(whole, part)
    assert (part / "metrics.jsonl").read_text().count("\n") == (whole / "metrics.jsonl").read_text().count("\n")
