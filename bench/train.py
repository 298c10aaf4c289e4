"""`srgan bench train`: the project's own training step, timed."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from srgan.bench.machine import machine, peak_rss_mb, synchronize
from srgan.configs import Config, SrganError
from srgan.models import resolve_runtime
from srgan.models.runtime import set_deterministic
from srgan.training.loop import build_parts
from srgan.training.step import gan_step, generator_step


def bench_interleaved(configs: list[Config], iters: int, warmup: int) -> list[dict]:
    """Seconds per step of `gan_step` (or the generator-only step when the
    adversarial weight is 0) for each config on a fixed random batch, warm-up
    excluded. The configs' steps are taken in turn in one process, so that the
    noise of a shared machine falls on all of them alike. Give them
    `loss.perceptual.weights: none` to need no VGG file: the cost is the same."""
    benches = [StepBench(config) for config in configs]
    if any(bench.runtime.device.type == "cuda" for bench in benches):
        torch.cuda.reset_peak_memory_stats()  # once, after building: the peak of the steps
    for i in range(warmup + iters):
        for bench in benches:
            bench.step(timed=i >= warmup)
    return [bench.result(iters) for bench in benches]


class StepBench:
    """One config's networks, optimizers and fixed batch, and its step times."""

    def __init__(self, config: Config):
        self.config = config
        t = config.train
        self.runtime = resolve_runtime(t.device, t.precision, t.channels_last)
        torch.manual_seed(t.seed)
        self.deterministic = t.deterministic
        self.parts = build_parts(config, self.runtime)
        b, c, s = config.data.batch_size, config.data.crop_size, config.model.scale
        hr = torch.rand(b, 3, c, c)
        lr = F.interpolate(hr, scale_factor=1 / s, mode="bicubic").clamp(0, 1)
        self.lr, self.hr = self.runtime.tensor(lr), self.runtime.tensor(hr)
        self.gan = config.loss.weights.adversarial > 0
        self.times: list[float] = []
        self.finite = True

    def step(self, timed: bool) -> None:
        set_deterministic(self.deterministic)  # process-wide: set for each config's step in turn
        started = time.perf_counter()
        stats = (gan_step if self.gan else generator_step)(self.parts, self.lr, self.hr)
        synchronize(self.runtime.device)
        self.finite = bool(torch.isfinite(stats["g_loss"]))  # also waits for the step
        if timed:
            self.times.append(time.perf_counter() - started)

    def result(self, iters: int) -> dict:
        config, runtime, median = self.config, self.runtime, statistics.median(self.times)
        result = {
            "bench": "train",
            "device": runtime.device.type,
            "precision": runtime.precision,
            "channels_last": runtime.channels_last,
            "compile": config.train.compile,
            "update": config.gan.update,
            "deterministic": config.train.deterministic,
            "batch": config.data.batch_size,
            "crop": config.data.crop_size,
            "scale": config.model.scale,
            "arch": config.model.arch,
            "blocks": config.model.blocks,
            "channels": config.model.channels,
            "perceptual": f"{config.loss.perceptual.network}:{config.loss.perceptual.layer}",
            "iters": iters,
            "median_s_per_step": median,
            "min_s_per_step": min(self.times),
            "images_per_s": config.data.batch_size / median,
            "peak_rss_mb": round(peak_rss_mb(), 1),  # of the process: with several configs, of all so far
            "finite": self.finite,
            **machine(),
        }
        if runtime.device.type == "cuda":
            result["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)  # as peak_rss_mb
        return result


def run_yardstick(path: Path, config: Config, iters: int, warmup: int) -> dict:
    """The common training step (../shared/bench/yardstick_step.py) on the same shapes, in a child process."""
    if not path.is_file():
        raise SrganError(f"--yardstick: {path}: no such file")
    command = [
        sys.executable, str(path), "--batch", str(config.data.batch_size), "--crop", str(config.data.crop_size),
        "--scale", str(config.model.scale), "--iters", str(iters), "--warmup", str(warmup),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SrganError(f"--yardstick: {path} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1])
