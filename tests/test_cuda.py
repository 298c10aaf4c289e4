"""CUDA: mixed precision with its gradient scaler, channels_last, compile, the
out-of-memory tile retry, cuda:K. Skipped (with the reason) without a GPU;
`make gpu-check` runs them first on a machine that has one. What a CPU can
check runs everywhere: the tile halving on an out-of-memory error in
test_upscale.py, the refusals of cuda and fp16 without a GPU in
test_cpu_refusals.py."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_overrides
from srgan.configs import load_config
from srgan.files.errors import SrganError
from srgan.models import Generator, resolve_runtime

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available())"),
]


def parts_for(precision: str, **extra):
    from srgan.training.loop import build_parts

    config = load_config(
        "demo",
        [
            "model.blocks=2",
            "model.channels=16",
            "model.d_channels=16",
            "loss.perceptual.weights=none",
            f"train.precision={precision}",
            *[f"{k}={v}" for k, v in extra.items()],
        ],
    )
    runtime = resolve_runtime("cuda", precision, True)
    return build_parts(config, runtime), runtime


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_steps_are_finite_and_fp16_scales_its_loss(precision):
    from srgan.training.step import gan_step

    parts, runtime = parts_for(precision)
    hr = runtime.tensor(torch.rand(4, 3, 64, 64))
    lr = runtime.tensor(torch.nn.functional.interpolate(hr, scale_factor=0.25, mode="bicubic").clamp(0, 1))
    for _ in range(3):
        stats = gan_step(parts, lr, hr)
    assert all(bool(torch.isfinite(v)) for v in stats.values())
    assert parts.scaler.is_enabled() == (precision == "fp16")
    if precision == "fp16":
        assert parts.scaler.get_scale() > 0


def test_networks_are_channels_last_on_the_gpu():
    parts, _ = parts_for("bf16")
    weight = parts.generator.head[0].weight
    assert weight.is_cuda and weight.is_contiguous(memory_format=torch.channels_last)


def test_compiled_networks_train(photo_dir, tmp_path):
    from srgan.training import train

    run = train(
        load_config(
            "demo",
            [
                o
                for o in tiny_overrides(photo_dir, tmp_path / "run")
                if not o.startswith(("train.device", "train.precision"))
            ]
            + ["train.device=cuda", "train.precision=bf16", "train.compile=true"],
        )
    )
    assert (run / "checkpoints" / "last.pt").is_file()


def test_cuda_out_of_memory_halves_the_tile(caplog):
    import numpy as np

    from srgan.inference.upscale import inference_network, upscale_pixels

    runtime = resolve_runtime("cuda", "fp32", True)
    network = inference_network(Generator(4, 2, 64).eval(), runtime)
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(max(0, free - (512 << 20)), dtype=torch.uint8, device="cuda")  # leave ~512 MB
    try:
        image = np.random.default_rng(0).integers(0, 256, (1024, 1024, 3), dtype=np.uint8)
        out = upscale_pixels(network, image, runtime, tile=0)
    finally:
        del hog
        torch.cuda.empty_cache()
    assert out.shape == (4096, 4096, 3)
    assert any("out of memory at the whole" in r.getMessage() for r in caplog.records)


def test_cuda_k_picks_a_device_and_refuses_one_that_is_not_there():
    assert resolve_runtime("cuda:0", "fp32").device == torch.device("cuda:0")
    with pytest.raises(SrganError, match="cuda:99: this machine has"):
        resolve_runtime("cuda:99", "fp32")


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("discriminator", ["vgg", "unet"])
def test_esrgan_discriminators_train_deterministically_under_amp(discriminator, precision):
    """The VGG-style and U-Net (spectral norm) discriminators with the
    relativistic objective and 2 micro-batches, under autocast, channels_last
    and deterministic kernels (the U-Net's upsampling must not use a kernel
    whose CUDA backward is non-deterministic): finite, and the same bits twice."""
    from srgan.models.runtime import set_deterministic
    from srgan.training.step import gan_step

    set_deterministic(True)
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        parts, runtime = parts_for(
            precision,
            **{
                "gan.discriminator": discriminator,
                "gan.d_loss": "relativistic",
                "data.crop_size": 64,
                "data.batch_size": 4,
                "train.accumulate": 2,
            },
        )
        hr = runtime.tensor(torch.rand(4, 3, 64, 64, generator=torch.Generator().manual_seed(1)))
        lr = runtime.tensor(torch.nn.functional.interpolate(hr, scale_factor=0.25, mode="bicubic").clamp(0, 1))
        for _ in range(3):
            stats = gan_step(parts, lr, hr)
        assert all(bool(torch.isfinite(v)) for v in stats.values())
        results.append([p.detach().clone() for p in parts.discriminator.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))
