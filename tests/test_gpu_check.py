"""`make gpu-check` on this machine: its CUDA parts skip, each with its
reason; the part that runs anywhere (a 1-rank torchrun job) runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

GPU_CHECK = Path(__file__).resolve().parent.parent / "tools" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU, make gpu-check runs everything")
def test_gpu_check_without_a_gpu_skips_the_cuda_parts_and_says_why():
    done = subprocess.run([sys.executable, str(GPU_CHECK), "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    checks = summary["checks"]
    assert summary["cuda"] is False
    skipped = ("cuda tests", "train + resume", "upscale", "bench train", "bench upscale", "rrdb", "gan knobs")
    skipped = (*skipped, "degradations")
    for name in (*skipped, "memory planning"):
        assert checks[name]["ok"] is None and "no CUDA device" in checks[name]["skipped"]
    assert checks["torchrun, 1 rank"]["ok"] is True and checks["torchrun, 1 rank"]["backend"] == "gloo"


def test_the_degradations_check_measures_the_step_and_both_kinds_of_pairs(tmp_path):
    """The GPU check's degradation part, run on the CPU at a tiny size: it
    reports the step's rate, degraded and bicubic pairs a second, and their
    ratio (its figures on a GPU are what docs/degradations.md lacks)."""
    sys.path.insert(0, str(GPU_CHECK.parent))
    from gpu_check import check_degradations

    result = check_degradations(tmp_path, device="cpu", blocks=1, batch=2, crop=64, iters=1)
    assert result["ok"] is True, result
    assert result["workers"] == 5  # realesrnet_x4's, Real-ESRGAN's workers a GPU
    assert min(result["step_images_per_s"], result["realesrgan_pairs_per_s"], result["bicubic_pairs_per_s"]) > 0
    ratio = result["realesrgan_pairs_per_s"] / result["step_images_per_s"]
    assert result["degraded_over_step"] == round(ratio, 2)
