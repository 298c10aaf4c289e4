"""Asking for CUDA where there is none: `--device cuda`, `train.device=cuda`
and fp16 (CUDA only) are one line on stderr, exit status 2, before any
work: no output, no run folder. These need a machine without a GPU (as the
test machines are); test_cuda.py covers the GPU side."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from conftest import assert_refused, bare_checkpoint, set_args, skimage_photo, tiny_overrides

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")

NO_CUDA = "{key} cuda: no CUDA device is available (use auto or cpu)"
FP16 = "{key} fp16: needs a CUDA device (use auto, fp32 or bf16 on the CPU)"


@pytest.fixture
def inputs(tmp_path):
    """An image in its own folder and a tiny generator checkpoint beside it."""
    (tmp_path / "in").mkdir()
    Image.fromarray(skimage_photo("coffee")[:32, :32]).save(tmp_path / "in" / "coffee.png")
    bare_checkpoint(tmp_path / "g.pt")
    return tmp_path


@pytest.mark.parametrize(
    "options, message",
    [
        (["--device", "cuda"], NO_CUDA.format(key="--device")),
        (["--device", "cuda:0"], NO_CUDA.format(key="--device").replace("cuda:", "cuda:0:")),
        (["--device", "cpu", "--precision", "fp16"], FP16.format(key="--precision")),
        (["--precision", "fp16"], FP16.format(key="--precision")),  # auto picks the CPU here
    ],
)
@pytest.mark.parametrize("command", ["upscale", "evaluate", "compare"])
def test_commands_refuse_cuda_and_fp16_without_a_gpu(srgan, inputs, command, options, message):
    photo, checkpoint = inputs / "in" / "coffee.png", inputs / "g.pt"
    args = {
        "upscale": ["upscale", photo, "-k", checkpoint],
        "evaluate": ["evaluate", photo.parent, "-k", checkpoint, "--json", inputs / "scores.json"],
        "compare": ["compare", checkpoint, photo, "-o", inputs / "cmp.png"],
    }[command]
    result = srgan(*args, *options)
    assert_refused(result, message)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert sorted(p.relative_to(inputs).as_posix() for p in inputs.rglob("*")) == ["g.pt", "in", "in/coffee.png"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.device=cuda"], NO_CUDA.format(key="train.device")),
        (["train.device=cuda:0"], NO_CUDA.format(key="train.device").replace("cuda:", "cuda:0:")),
        (["train.precision=fp16"], FP16.format(key="train.precision")),  # tiny_overrides' train.device=cpu
        (["train.device=auto", "train.precision=fp16"], FP16.format(key="train.precision")),
    ],
)
def test_train_refuses_cuda_and_fp16_without_a_gpu(srgan, photo_dir, tmp_path, overrides, message):
    run_dir = tmp_path / "run"
    result = srgan("train", "--config", "demo", *set_args(tiny_overrides(photo_dir, run_dir, *overrides)))
    assert_refused(result, message)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert list(tmp_path.iterdir()) == []  # no run folder begun
