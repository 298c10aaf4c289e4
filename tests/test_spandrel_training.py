"""srgan's training features on spandrel's architectures (tiny SPAN, RealPLKSR,
DAT and SwinIR): each discriminator and objective, the same bits from the same
seed, train.accumulate, bf16 with channels_last, train.compile, DDP, `srgan
runs` and a sweep over model.arch."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import set_args
from srgan.configs import load_config
from srgan.models import build_generator, resolve_architecture, resolve_runtime
from srgan.training import train
from srgan.training.loop import build_parts
from srgan.training.state import load_checkpoint
from srgan.training.step import gan_step
from test_reproducibility import assert_same_checkpoints
from test_spandrel_archs import CLASSES, CROP, TINY, spandrel_overrides, tiny_model

ARCHS = list(TINY)
STEP = ["model.d_channels=8", "loss.perceptual.weights=none", "loss.perceptual.layer=relu1_2", "train.device=cpu"]


def parts_for(arch, *extra, precision="fp32", channels_last=True):
    config = resolve_architecture(
        load_config(
            "demo",
            [
                f"model.arch={arch}",
                *TINY[arch],
                f"data.crop_size={CROP.get(arch, 32)}",
                *STEP,
                "data.batch_size=4",
                *extra,
            ],
        )
    )
    torch.manual_seed(0)
    return build_parts(config, resolve_runtime("cpu", precision, channels_last))


def batch(arch, seed=1):
    side = CROP.get(arch, 32)
    hr = torch.rand(4, 3, side, side, generator=torch.Generator().manual_seed(seed))
    lr = F.interpolate(hr, scale_factor=0.25, mode="bicubic").clamp(0, 1)
    return lr.contiguous(memory_format=torch.channels_last), hr.contiguous(memory_format=torch.channels_last)


def weights(module):
    """The trainable weights: not SPAN's eval_conv (a frozen copy the others
    make), nor tiny DAT's position bias: its width is a sixteenth of a
    branch's, 1 at 32 dims, and a LayerNorm of one feature outputs its bias
    alone, so no gradient reaches the layers before it."""
    return {
        name: p.detach().clone()
        for name, p in module.named_parameters()
        if p.requires_grad and p.numel() and ".pos." not in name
    }


def changed(before, module):
    now = dict(module.named_parameters())
    return [name for name, tensor in before.items() if not torch.equal(tensor, now[name].detach())]


@pytest.mark.parametrize("arch", ARCHS)
def test_each_discriminator_and_objective_updates_both_networks(arch):
    """Each discriminator once and each objective once (3 steps, not 9)."""
    for discriminator, d_loss, update in [
        ("srgan", "bce", "retain_graph"),
        ("vgg", "linear", "detach"),
        ("unet", "relativistic", "retain_graph"),
    ]:
        parts = parts_for(arch, f"gan.discriminator={discriminator}", f"gan.d_loss={d_loss}", f"gan.update={update}")
        g, d = weights(parts.generator), weights(parts.discriminator)
        stats = gan_step(parts, *batch(arch))
        assert all(math.isfinite(value.item()) for value in stats.values()), (discriminator, stats)
        # every trainable weight of both networks moves
        assert not set(g) - set(changed(g, parts.generator)), discriminator
        assert not set(d) - set(changed(d, parts.discriminator)), discriminator


@pytest.mark.parametrize("arch", ARCHS)
def test_two_micro_batches_give_the_update_of_the_whole_batch(arch):
    """gan_step with train.accumulate 2 against 1: the discriminator in eval
    mode (test_accumulate says why), and so the generator's BatchNorm."""
    whole, micro = parts_for(arch), parts_for(arch, "train.accumulate=2")
    for parts in (whole, micro):
        parts.discriminator.eval()
        # DAT's BatchNorm (in its spatial attention's depth-wise conv) normalises each micro-batch
        # alone in train mode, as srgan's BatchNorm generator does; its running statistics do not
        for module in parts.generator.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.eval()
    stats_whole, stats_micro = gan_step(whole, *batch(arch)), gan_step(micro, *batch(arch))
    for net in ("generator", "discriminator"):
        trained = [(n, p) for n, p in getattr(micro, net).named_parameters() if p.requires_grad and p.numel()]
        for (name, pa), pb in zip(
            trained, [p for p in getattr(whole, net).parameters() if p.requires_grad and p.numel()], strict=True
        ):
            # test_accumulate's tolerances: fp32 rounding of sums grouped otherwise, then Adam's step
            assert (pa.grad - pb.grad).abs().max().item() <= 1e-3 * pb.grad.abs().max().item() + 1e-12, (net, name)
            # Adam's first step divides by |grad|: the discriminator's elements with a gradient near
            # Adam's eps move by amounts its rounding decides, so its weights are left out
            assert net == "discriminator" or torch.allclose(pa, pb, rtol=0, atol=1e-6), (net, name)
    for name in stats_whole:
        assert stats_micro[name].item() == pytest.approx(stats_whole[name].item(), rel=1e-5), name


@pytest.fixture(scope="module")
def bf16_runs(photo_dir, tmp_path_factory):
    """Two runs of each architecture from the same seed, bf16 and channels_last, a GAN step."""
    root = tmp_path_factory.mktemp("bf16")
    extra = ("train.precision=bf16", "train.channels_last=true", "data.batch_size=2", "train.max_steps=1")
    return root, {
        arch: [
            train(load_config("demo", spandrel_overrides(arch, photo_dir, root / f"{arch}{n}", *extra))) for n in "ab"
        ]
        for arch in ARCHS
    }


@pytest.mark.parametrize("arch", ARCHS)
def test_bf16_channels_last_trains_and_two_runs_give_the_same_bits(bf16_runs, arch):
    a, b = bf16_runs[1][arch]
    assert_same_checkpoints(a, b)
    rows = [json.loads(line) for line in (a / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] and all(
        math.isfinite(r["g_loss"]) and math.isfinite(r["d_loss"]) for r in rows
    )


@pytest.mark.parametrize("arch", ["span"])  # swinir passes too (seconds more: the suite's budget)
def test_two_ranks_hold_the_same_weights_and_one_process_resumes(arch, photo_dir, tmp_path):
    """DDP (gloo, 2 CPU ranks): a parameter without a gradient would stop
    DDP's reducer; the ranks compare their weights at every checkpoint."""
    from test_distributed import rows, torchrun

    run = tmp_path / "run"
    extra = ("train.max_steps=2", "train.pretrain_steps=1", "data.batch_size=1", "data.repeat=2")
    done = torchrun("train", *set_args(spandrel_overrides(arch, photo_dir, run, *extra)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the 2 ranks hold the same weights" in done.stderr
    assert [r["world_size"] for r in rows(run)] == [2, 2]
    resumed = train(load_config(str(run / "config.yaml"), ["train.max_steps=3"]), resume=run)
    assert [r["step"] for r in rows(resumed)] == [1, 2, 3] and rows(resumed)[-1]["world_size"] == 1
    assert load_checkpoint(run)["config"]["model"]["arch"] == arch


def test_srgan_runs_lists_each_run_with_its_architecture(bf16_runs, srgan):
    root, runs = bf16_runs
    result = srgan("runs", root, "--json")
    assert result.returncode == 0, result.stderr
    listed = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(listed) == {run.name for pair in runs.values() for run in pair}
    for arch, pair in runs.items():
        for run in pair:
            row = listed[run.name]
            assert row["changes"]["model.arch"] == arch and row["state"] == "finished" and row["step"] == 1, row
    table = srgan("runs", root)
    assert table.returncode == 0 and "arch=realplksr" in table.stdout and "arch=swinir" in table.stdout


def test_a_sweep_over_model_arch_trains_each(photo_dir, srgan, tmp_path):
    """model.arch and its model.options swept together (the options differ
    between architectures), so that each stays tiny; one step each."""
    sweep = tmp_path / "sweep"
    one_step = spandrel_overrides("span", photo_dir, sweep, "train.max_steps=1", "data.batch_size=1")
    base = [value for value in one_step if not value.startswith("model.options")]
    options = {arch: TINY[arch][0].split("=", 1)[1] for arch in ("span", "realplksr")}
    variants = ",".join(f"{{arch: {arch}, options: {value}}}" for arch, value in options.items())
    args = set_args(base)
    result = srgan("train", *args, "--sweep", f"model={variants}")
    assert result.returncode == 0, result.stderr
    result = srgan("runs", sweep, "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert sorted(row["changes"]["model.arch"] for row in rows) == ["realplksr", "span"]
    for row in rows:
        state = load_checkpoint(Path(row["run"]))
        assert state["step"] == 1 and state["config"]["model"]["arch"] == row["changes"]["model.arch"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available())")
@pytest.mark.parametrize("arch", ["span", "swinir"])
def test_compiled_networks_train_on_cuda(arch, photo_dir, tmp_path):
    """train.compile on a convolutional network and a window transformer, as
    test_cuda.py's: on CPU, inductor's compilation of a single step of tiny SPAN
    takes longer than the rest of this file."""
    import spandrel

    on_cuda = ("train.device=cuda", "train.precision=bf16", "train.compile=true")
    overrides = [
        o
        for o in spandrel_overrides(arch, photo_dir, tmp_path / "run")
        if not o.startswith(("train.device", "train.precision"))
    ]
    run = train(load_config("demo", [*overrides, *on_cuda]))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["g_loss"]) for r in rows)
    state = load_checkpoint(run)  # the plain modules' keys: spandrel reads the generator back
    network = {key.removeprefix("network."): tensor for key, tensor in state["generator"].items()}
    assert type(spandrel.ModelLoader().load_from_state_dict(network).model).__name__ == CLASSES[arch].__name__


def test_realplksr_trains_compiled_on_the_cpu_with_eager_losses(photo_dir, tmp_path):
    """train.compile on the CPU through models/large_kernel.py's autograd
    function, srgan's one part inside a spandrel network (the tiny RealPLKSR's
    kernel is 15 wide): inductor compiles it and the compiled steps' losses are
    eager's to 1e-4 (inductor fuses the fp32 work in another order: 3e-5
    measured). The other architectures compiled on the CPU:
    tools/compile_check.py (about a minute each with a cold cache)."""
    losses = {}
    for compiled in (False, True):
        overrides = spandrel_overrides("realplksr", photo_dir, tmp_path / str(compiled), f"train.compile={compiled}")
        run = train(load_config("demo", overrides))
        losses[compiled] = [json.loads(line)["g_loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(losses[True]) == 2 and losses[True] == pytest.approx(losses[False], rel=1e-4)
    assert losses[True] != losses[False]  # not to the bit: inductor's kernels ran, not eager's


@pytest.mark.parametrize("arch, runs_in_fp16", [("span", True), ("dat", False)])
def test_a_network_spandrel_marks_unfit_for_a_precision_trains_in_fp32(arch, runs_in_fp16):
    """All four run in bf16; spandrel marks DAT (and SwinIR) unfit for fp16,
    so under fp16 autocast the training forward of DAT runs in fp32: the same
    numbers as without autocast, and gradients for every weight."""
    generator = build_generator(tiny_model(arch)).train()
    x = torch.rand(2, 3, 16, 16)
    plain = generator(x)
    with torch.autocast("cpu", dtype=torch.float16):
        out = generator(x)
    assert out.dtype == (torch.float16 if runs_in_fp16 else torch.float32)
    if not runs_in_fp16:
        assert torch.equal(out, plain)
    out.float().mean().backward()
    assert all(p.grad is not None for p in generator.parameters() if p.requires_grad)
