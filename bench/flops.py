"""`srgan bench train --flops`: how much arithmetic a training step does and
how fast the machine does arithmetic, so that a speed-up over the yardstick
can be read against the most any step doing the same work could reach.

A step's floating-point operations are counted by torch's FlopCounterMode
(convolutions and matrix products, forward and backward: the work that
dominates these networks); the machine's rate is that of a large matrix
product in the same precision, the best case for its vector units."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from srgan.bench.machine import synchronize
from srgan.bench.train import StepBench
from srgan.configs import Config
from srgan.files.errors import SrganError
from srgan.models.runtime import DTYPES

# Runs a yardstick script once under the counter, in a child process as it is timed.
_COUNT_YARDSTICK = """
import runpy, sys
from torch.utils.flop_counter import FlopCounterMode
path = sys.argv[1]
sys.argv = sys.argv[1:]
with FlopCounterMode(display=False) as counter:
    runpy.run_path(path, run_name="__main__")
print("flops", counter.get_total_flops())
"""


def step_flops(step: Callable[[], None]) -> int:
    """Floating-point operations (a multiply-add counts 2) of one call of `step`."""
    with FlopCounterMode(display=False) as counter:
        step()
    return int(counter.get_total_flops())


def yardstick_flops(command: list[str]) -> int:
    """The operations of one yardstick step; `command` is the timing command
    (python, script, arguments), which must ask for one step and no warm-up.
    Raises SrganError when the script fails or prints no count."""
    done = subprocess.run([command[0], "-c", _COUNT_YARDSTICK, *command[1:]], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("flops ")]
    if done.returncode != 0 or not lines:
        raise SrganError(f"--flops: counting {command[1]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return int(lines[-1].split()[1])


def matmul_rate(dtype: torch.dtype, device: torch.device, size: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of a size x size matrix product in `dtype`, the best of `repeats`:
    about the most this machine's vector units (or GPU) give a convolution."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    torch.mm(a, b)  # warm-up: oneDNN / cuBLAS pick their kernels
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        torch.mm(a, b)
        synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def flops_report(config: Config, median_s: float, yardstick: list[str] | None, yardstick_s: float | None) -> dict:
    """Our step's operations and rate, the machine's matmul rate in fp32 and
    in the step's precision, and with a yardstick command (one step, no
    warm-up) its operations and rate, and the largest speed-up a step doing
    our operations at the machine's matmul rate could have over it."""
    bench = StepBench(config)
    ours = step_flops(lambda: bench.step(timed=False))
    device, precision = bench.runtime.device, bench.runtime.precision
    rates = {"fp32": matmul_rate(torch.float32, device)}
    if precision != "fp32":
        rates[precision] = matmul_rate(DTYPES[precision], device)
    report = {
        "gflop_per_step": ours / 1e9,
        "gflop_per_s": ours / 1e9 / median_s,
        "matmul_gflop_per_s": rates,
        "fraction_of_matmul_rate": ours / 1e9 / median_s / rates[precision],
    }
    if yardstick is not None and yardstick_s is not None:
        theirs = yardstick_flops(yardstick)
        report["yardstick_gflop_per_step"] = theirs / 1e9
        report["yardstick_gflop_per_s"] = theirs / 1e9 / yardstick_s
        report["yardstick_fraction_of_fp32_matmul_rate"] = theirs / 1e9 / yardstick_s / rates["fp32"]
        # Our step cannot take less than its operations at the matmul rate.
        report["speedup_ceiling"] = yardstick_s / (ours / 1e9 / rates[precision])
    return report
