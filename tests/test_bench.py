"""The speed levers change no mathematics, and the bench reports what it measured."""

import json
from pathlib import Path

import pytest
import torch

from conftest import run_cli
from srgan.configs import load_config
from srgan.models import resolve_runtime
from srgan.training.loop import build_parts
from srgan.training.step import gan_step

TINY = [
    "model.blocks=1",
    "model.channels=8",
    "model.d_channels=8",
    "loss.perceptual.weights=none",
    "loss.perceptual.layer=relu1_2",
    "train.precision=fp32",
    "train.device=cpu",
]


def test_channels_last_computes_what_nchw_does():
    """The same losses and gradients in either layout (up to float rounding)."""
    results = []
    for channels_last in (True, False):
        config = load_config("leftthomas_x4", TINY)
        runtime = resolve_runtime("cpu", "fp32", channels_last)
        torch.manual_seed(0)
        parts = build_parts(config, runtime)
        hr = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
        lr = torch.nn.functional.interpolate(hr, scale_factor=0.25, mode="bicubic").clamp(0, 1)
        stats = gan_step(parts, runtime.tensor(lr), runtime.tensor(hr))
        assert parts.generator.head[0].weight.is_contiguous(memory_format=torch.channels_last) == channels_last
        grads = [p.grad.contiguous() for p in parts.generator.parameters()]
        results.append((stats, grads))
    (stats_a, grads_a), (stats_b, grads_b) = results
    for name in stats_a:
        assert torch.allclose(stats_a[name], stats_b[name], rtol=1e-4, atol=1e-6), name
    # conv biases before a BatchNorm have a true gradient of 0: compare against the overall scale
    scale = max(g.abs().max().item() for g in grads_b)
    for a, b in zip(grads_a, grads_b, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-3 * scale)


def test_bench_train_prints_one_json_line_with_its_figures():
    args = [a for v in TINY for a in ("--set", v)]
    result = run_cli("bench", "train", *args, "--batch", "2", "--crop", "32", "--iters", "2", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("median_s_per_step", "min_s_per_step", "images_per_s", "peak_rss_mb"):
        assert figures[key] > 0, key
    assert figures["min_s_per_step"] <= figures["median_s_per_step"]
    assert (figures["precision"], figures["update"], figures["device"]) == ("fp32", "retain_graph", "cpu")
    assert figures["batch"] == 2 and figures["crop"] == 32 and figures["finite"] is True
    assert "gflop_per_step" not in figures  # counted only with --flops
    # the run's plan (train.micro_batch auto): measured, its cost against the step's
    assert figures["plan"] == "measured" and figures["micro_batch"] in (1, 2)
    assert figures["planned_peak_mb"] > 0 and figures["plan_s"] > 0
    # both rounded to 3 decimals: plan_s by up to 0.0005 s, the ratio by 0.0005
    rounding = 0.0005 / figures["median_s_per_step"] + 0.0005
    assert figures["plan_over_step"] == pytest.approx(figures["plan_s"] / figures["median_s_per_step"], abs=rounding)
    assert figures["first_step_s"] > 0  # the cold first step, the planning's cost at start-up is judged beside


def test_bench_train_sums_the_micro_batches_the_config_pins():
    args = [a for v in [*TINY, "train.micro_batch=1"] for a in ("--set", v)]
    result = run_cli("bench", "train", *args, "--batch", "2", "--crop", "32", "--iters", "1", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert (figures["plan"], figures["micro_batch"], figures["planned_peak_mb"]) == ("pinned", 1, None)


def test_bench_refuses_a_yardstick_of_other_shapes(tmp_path):
    script = tmp_path / "yardstick.py"
    script.write_text("print('{}')\n")
    args = [a for v in TINY for a in ("--set", v)]
    result = run_cli(
        "bench", "train", *args, "--batch", "2", "--crop", "32", "--iters", "1", "--yardstick", str(script)
    )
    assert result.returncode == 2 and "its step has 16 blocks" in result.stderr


def test_bench_upscale_reports_its_figures_and_matches_the_plain_forward():
    result = run_cli(
        "bench",
        "upscale",
        "--set",
        "model.blocks=1",
        "--set",
        "model.channels=8",
        "--size",
        "40x24",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--device",
        "cpu",
        "--precision",
        "fp32",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert (figures["width"], figures["height"], figures["scale"], figures["blocks"]) == (40, 24, 4, 1)
    for key in ("median_s", "output_mp_per_s", "peak_rss_mb", "baseline_median_s", "speedup"):
        assert figures[key] > 0, key
    # the fused, channels_last, tiled path computes the plain forward
    assert figures["fp32_max_abs_diff"] < 1e-4


def test_bench_compares_retain_graph_with_detach_in_one_run():
    args = [a for v in TINY for a in ("--set", v)]
    result = run_cli(
        "bench", "train", *args, "--batch", "2", "--crop", "32", "--iters", "2", "--compare-update", "--json"
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["update"] == "retain_graph" and figures["detach_median_s_per_step"] > 0
    assert figures["retain_over_detach"] == figures["median_s_per_step"] / figures["detach_median_s_per_step"]


ESRGAN_STEP = [
    "model.arch=rrdb",
    "model.growth=32",
    "gan.discriminator=vgg",
    "gan.d_loss=relativistic",
    "model.channels=64",
    "model.d_channels=64",
    "loss.perceptual.network=vgg19",
    "loss.perceptual.layer=conv5_4",
    "loss.perceptual.criterion=l1",
    "train.precision=fp32",
    "train.device=cpu",
]
YARDSTICK_ESRGAN = Path(__file__).resolve().parents[2] / "shared" / "bench" / "yardstick_esrgan.py"


@pytest.mark.skipif(not YARDSTICK_ESRGAN.is_file(), reason="../shared/bench/yardstick_esrgan.py is not here")
def test_bench_times_the_esrgan_yardstick_on_the_same_shapes():
    """A config with ESRGAN's D and objective runs against yardstick_esrgan.py,
    which gets the same batch, crop, scale and --blocks."""
    args = [a for v in ESRGAN_STEP for a in ("--set", v)]
    result = run_cli(
        "bench",
        "train",
        *args,
        "--batch",
        "2",
        "--crop",
        "32",
        "--blocks",
        "1",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--yardstick",
        str(YARDSTICK_ESRGAN),
        "--flops",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["yardstick"] == {"impl": "yardstick-esrgan", "batch": 2, "crop": 32, "scale": 4, "blocks": 1}
    assert (figures["discriminator"], figures["d_loss"], figures["blocks"]) == ("vgg", "relativistic", 1)
    assert figures["yardstick_median_s_per_step"] > 0 and figures["speedup"] > 0
    # --flops: the same networks on the same batch, so the work differs only by
    # the D forwards: BasicSR's step runs D five times (one only to detach it),
    # ours four; both the same generator, VGG and D's backward passes.
    ours, theirs = figures["gflop_per_step"], figures["yardstick_gflop_per_step"]
    assert 0.8 * theirs < ours < theirs
    ceiling = figures["yardstick_median_s_per_step"] * figures["matmul_gflop_per_s"]["fp32"] / ours
    assert figures["speedup_ceiling"] == pytest.approx(ceiling)


def test_flops_counts_what_runs():
    """The counter sees a backward's weight gradient and, only when an input
    needs one, its input gradient: what makes a frozen D's backward cheaper."""
    from srgan.bench.flops import step_flops

    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    forward = 2 * 1 * 8 * 16 * 16 * 3 * 9  # multiply-adds of a 1x3x16x16 input, 2 FLOPs each
    x = torch.rand(1, 3, 16, 16)
    assert step_flops(lambda: conv(x).sum().backward()) == 2 * forward
    x.requires_grad_(True)
    assert step_flops(lambda: conv(x).sum().backward()) == 3 * forward
    conv.requires_grad_(False)
    assert step_flops(lambda: conv(x).sum().backward()) == 2 * forward


def test_yardstick_flops_counts_one_run_of_the_script(tmp_path):
    from srgan.bench.flops import yardstick_flops

    script = tmp_path / "yardstick.py"
    script.write_text("import sys, torch\nn = int(sys.argv[1])\ntorch.mm(torch.rand(n, 32), torch.rand(32, 16))\n")
    import sys

    assert yardstick_flops([sys.executable, str(script), "64"]) == 2 * 64 * 32 * 16
    script.write_text("raise SystemExit('broken')\n")
    with pytest.raises(Exception, match="counting .*yardstick.py failed"):
        yardstick_flops([sys.executable, str(script), "64"])


def test_bench_refuses_the_esrgan_yardstick_for_another_step(tmp_path):
    script = tmp_path / "yardstick_esrgan.py"
    script.write_text("print('{}')\n")
    args = [a for v in TINY for a in ("--set", v)]
    result = run_cli(
        "bench", "train", *args, "--batch", "2", "--crop", "32", "--iters", "1", "--yardstick", str(script)
    )
    assert result.returncode == 2 and "yardstick_esrgan.py times ESRGAN's step" in result.stderr
    args = [a for v in [*ESRGAN_STEP, "loss.perceptual.criterion=mse"] for a in ("--set", v)]
    result = run_cli(
        "bench", "train", *args, "--batch", "2", "--crop", "32", "--iters", "1", "--yardstick", str(script)
    )
    assert result.returncode == 2 and "an L1 perceptual loss on VGG19 conv5_4" in result.stderr


def test_the_generators_bench_times_a_presets_generator_and_counts_its_parameters(tmp_path, capsys):
    from srgan.bench.generators import main
    from srgan.models import build_generator

    config = tmp_path / "span.yaml"
    config.write_text("model: {arch: span, options: {feature_channels: 8}}\n")
    assert main(["--config", str(config), "--size", "16", "--iters", "1", "--warmup", "0", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    expected = sum(p.numel() for p in build_generator(load_config(str(config)).model).parameters())
    assert row["generator"] == str(config) and row["parameters"] == expected and row["min_ms"] > 0
