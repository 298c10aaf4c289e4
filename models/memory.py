"""How much memory the device has for srgan, and how much a piece of work
takes at its peak: what training's micro-batch and upscaling's tiles are
planned from (docs/training.md, docs/upscale.md).

CUDA: torch's caching allocator counts every tensor, so the peak is
`max_memory_allocated` above what was allocated before, and the memory at
hand is the free memory plus what torch's cache already holds.

CPU: torch keeps no count of its CPU tensors, so the process's own figures
are read from /proc/self/status: the work's peak is the growth of the peak
resident set (VmHWM, reset before through /proc/self/clear_refs), and the
memory at hand is the least of what the kernel can still give (MemAvailable),
what the cgroup allows (memory.max less memory.current) and what the
address-space limit leaves (RLIMIT_AS less VmSize): whichever a run would
hit first. Linux only; elsewhere the figures are None and nothing is planned.
"""

from __future__ import annotations

import ctypes
import resource
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

T = TypeVar("T")

CGROUP = Path("/sys/fs/cgroup")  # cgroup v2's unified hierarchy, where a container's limit is


def available_bytes(device: torch.device) -> int | None:
    """The bytes srgan can still allocate on `device`; None where it cannot
    tell (no /proc: not Linux)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return free + cached
    limits = [limit for limit in (mem_available(), cgroup_room(), address_space_room()) if limit is not None]
    return min(limits) if limits else None


def measure_peak(device: torch.device, work: Callable[[], T]) -> tuple[T, int | None]:
    """Run `work` and return what it returned, and the bytes above the
    memory in use before that it took at its peak (None where the CPU's
    figures cannot be read)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        allocated = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        value = work()
        torch.cuda.synchronize(device)
        return value, torch.cuda.max_memory_allocated(device) - allocated
    release_free_heap()
    if not reset_peak_resident():
        return work(), None
    resident = status_bytes("VmRSS")
    value = work()
    peak = status_bytes("VmHWM")
    return value, None if resident is None or peak is None else max(0, peak - resident)


def mem_available() -> int | None:
    """MemAvailable of /proc/meminfo: what the kernel can give without swapping."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_room() -> int | None:
    """The cgroup v2 memory limit of this process less its usage; None without a limit."""
    try:
        relative = Path("/proc/self/cgroup").read_text().split("::", 1)[1].strip().lstrip("/")
        folder = CGROUP / relative
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((folder / "memory.current").read_text()))
    except (OSError, ValueError, IndexError):
        return None


def address_space_room() -> int | None:
    """RLIMIT_AS's soft limit less the address space in use; None without a limit."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    used = status_bytes("VmSize")
    return None if used is None else max(0, soft - used)


def status_bytes(field: str) -> int | None:
    """A kB field of /proc/self/status (VmRSS, VmHWM, VmSize), in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the kernel (glibc's malloc_trim)
    where the C library has it: work that reuses memory freed before it
    would otherwise take no new resident pages, and its peak would read as
    nothing."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl, macOS): no such call
        pass


def reset_peak_resident() -> bool:
    """Reset VmHWM to the current resident set (Linux >= 4.0); whether it could."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True
