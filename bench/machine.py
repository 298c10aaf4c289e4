"""What a figure was measured on: threads, CPU bf16 units, GPU, peak memory."""

from __future__ import annotations

import platform
import resource
from pathlib import Path

import torch


def cpu_flags() -> list[str]:
    """The flags that matter for these figures (AVX512, its bf16, AMX)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return []
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_fp16")
    return [f for f in wanted if f in flags]


def machine() -> dict:
    """The fields every figure names about the machine: CPU, its flags, torch's threads and version, the GPU."""
    info = {
        "cpu": platform.processor() or platform.machine(),
        "cpu_flags": cpu_flags(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def inference_setup(generator, runtime) -> dict:
    """The fields every inference figure names: which network, on what, how."""
    return {
        "arch": generator.arch,
        "scale": generator.scale,
        "blocks": generator.blocks,
        "channels": generator.channels,
        "device": runtime.device.type,
        "precision": runtime.precision,
        "channels_last": runtime.channels_last,
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
