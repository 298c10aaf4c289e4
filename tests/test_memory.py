"""models/memory.py: the CPU figures memory planning reads, against
allocations of known size and a real address-space limit (a child process
under RLIMIT_AS), no mock."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from srgan.models.memory import measure_peak, status_bytes

MiB = 2**20
linux_only = pytest.mark.skipif(status_bytes("VmRSS") is None, reason="reads /proc/self/status (Linux)")


@linux_only
def test_the_peak_of_a_piece_of_work_is_what_it_allocated_at_once():
    def work():
        a = torch.ones(64 * MiB // 4)  # 64 MiB, touched
        b = torch.ones(32 * MiB // 4)
        del a, b  # freed before the end: the peak, not the end, counts
        return 7

    value, peak = measure_peak(torch.device("cpu"), work)
    assert value == 7
    assert 90 * MiB <= peak <= 140 * MiB, peak / MiB
    _, small = measure_peak(torch.device("cpu"), lambda: torch.ones(4 * MiB // 4).sum())
    assert small < 32 * MiB, small / MiB  # measured again from the current resident set


@linux_only
def test_an_address_space_limit_is_the_memory_at_hand():
    child = textwrap.dedent(
        """
        import resource
        from srgan.models.memory import address_space_room, available_bytes, status_bytes
        import torch
        used = status_bytes("VmSize")
        resource.setrlimit(resource.RLIMIT_AS, (used + 512 * 2**20, resource.RLIM_INFINITY))
        print(address_space_room(), available_bytes(torch.device("cpu")))
        """
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    room, available = map(int, result.stdout.split())
    assert 480 * MiB <= room <= 512 * MiB, room / MiB
    assert available <= room
