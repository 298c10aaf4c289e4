"""`make gpu-check` on this machine: its CUDA parts skip, each with its
reason; the part that runs anywhere (a 1-rank torchrun job) runs."""

import json
import subprocess
import sys

import pytest
import torch


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, make gpu-check runs everything")
def test_gpu_check_without_a_gpu_skips_the_cuda_parts_and_says_why():
    done = subprocess.run(
        [sys.executable, "-m", "srgan.bench.gpu_check", "--json"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    checks = summary["checks"]
    assert summary["cuda"] is False
    for name in ("cuda tests", "train + resume", "upscale", "bench train", "bench upscale", "rrdb"):
        assert checks[name]["ok"] is None and "no CUDA device" in checks[name]["skipped"]
    assert checks["torchrun, 1 rank"]["ok"] is True and checks["torchrun, 1 rank"]["backend"] == "gloo"
