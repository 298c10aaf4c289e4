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
from srgan.configs import Config
from srgan.configs.networks import perceptual_layers
from srgan.configs.schema import OWN_ARCHS
from srgan.files.errors import SrganError
from srgan.models import resolve_architecture, resolve_runtime
from srgan.models.precision_choice import for_training
from srgan.models.runtime import set_deterministic
from srgan.training.ema import GeneratorEMA
from srgan.training.loop import build_parts
from srgan.training.micro_batch import plan_micro_batch
from srgan.training.step import gan_step, generator_step


def bench_interleaved(configs: list[Config], iters: int, warmup: int) -> list[dict]:
    """Seconds per step of `gan_step` (or the generator-only step when the
    adversarial weight is 0) for each config on a fixed random batch, warm-up
    excluded. The configs' steps are taken in turn in one process, so that the
    noise of a shared machine falls on all of them alike. Give them
    `loss.perceptual.weights: none` to need no VGG file: the cost is the same."""
    benches = [StepBench(config) for config in configs]
    if any(bench.runtime.device.type == "cuda" for bench in benches):
        torch.cuda.reset_peak_memory_stats()  # once, after building, so that the peak is the steps' own
    for i in range(warmup + iters):
        for bench in benches:
            bench.step(timed=i >= warmup)
    return [bench.result(iters) for bench in benches]


class StepBench:
    """One config's networks, optimizers and fixed batch, and its step times."""

    def __init__(self, config: Config):
        self.config = config = resolve_architecture(config)  # the options the report names: defaults included
        t = config.train
        runtime = resolve_runtime(t.device, t.precision, t.channels_last, keys=("train.device", "train.precision"))
        self.runtime = for_training(runtime, config)  # auto: what the run would choose
        torch.manual_seed(t.seed)
        self.deterministic = t.deterministic
        self.parts = build_parts(config, self.runtime)
        if self.parts.criterion.needs_ema:  # LDL: the EMA generator's forward is part of the step's cost
            self.parts.ema = GeneratorEMA(self.parts.generator, t.ema_decay).model
        b, c, s = config.data.batch_size, config.data.crop_size, config.model.scale
        hr = torch.rand(b, 3, c, c)
        lr = F.interpolate(hr, scale_factor=1 / s, mode="bicubic").clamp(0, 1)
        self.lr, self.hr = self.runtime.tensor(lr), self.runtime.tensor(hr)
        self.gan = config.loss.weights.adversarial > 0
        # The micro-batch the run would take (train.micro_batch; auto: trial
        # steps on copies of the networks), timed: the step below sums it, as
        # the run's would, and the report gives the planning's cost beside the step's.
        started = time.perf_counter()
        self.plan = plan_micro_batch(config, self.parts, self.gan)
        self.plan_s = time.perf_counter() - started
        self.parts.accumulate = self.plan.accumulate
        self.times: list[float] = []
        self.untimed = 0  # warm-up steps taken
        self.first_step_s = 0.0  # the first, cold, step: what planning adds to start-up is judged beside it
        self.finite = True

    def step(self, timed: bool) -> None:
        set_deterministic(self.deterministic)  # process-wide: set for each config's step in turn
        started = time.perf_counter()
        # GAN steps counted as a run counts them: lazy R1 on one in gan.r1_every, as in training
        taken = len(self.times) + self.untimed
        if self.gan:
            stats = gan_step(self.parts, self.lr, self.hr, gan_steps_before=taken)
        else:
            stats = generator_step(self.parts, self.lr, self.hr)
        synchronize(self.runtime.device)
        self.finite = bool(torch.isfinite(stats["g_loss"]))  # also waits for the step
        took = time.perf_counter() - started
        if taken == 0:
            self.first_step_s = took
        if timed:
            self.times.append(took)
        else:
            self.untimed += 1

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
            # srgan's own architectures' size; spandrel's is in their options
            **(
                {"blocks": config.model.blocks, "channels": config.model.channels}
                if config.model.arch in OWN_ARCHS
                else {"options": config.model.options}
            ),
            "perceptual": f"{config.loss.perceptual.network}:{','.join(perceptual_layers(config.loss.perceptual))}",
            "discriminator": config.gan.discriminator,
            "d_loss": config.gan.d_loss,
            "accumulate": config.train.accumulate,
            # the plan (training/micro_batch.py): the micro-batch, how it was chosen, its predicted peak
            "micro_batch": self.plan.micro_batch,
            "plan": self.plan.how,
            "planned_peak_mb": round(self.plan.peak / 2**20, 1) if self.plan.peak is not None else None,
            "plan_s": round(self.plan_s, 3),
            "plan_over_step": round(self.plan_s / median, 3),
            "first_step_s": round(self.first_step_s, 3),
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


def check_yardstick_shapes(path: Path, config: Config) -> bool:
    """Raise SrganError for a config whose step is not the yardstick's: SRGAN's
    (yardstick_step.py) or, for a config with the VGG-style D and the
    relativistic objective, ESRGAN's (yardstick_esrgan.py). Returns whether
    it is ESRGAN's, whose yardstick also takes --blocks."""
    esrgan = config.gan.discriminator == "vgg" and config.gan.d_loss == "relativistic"
    if ("esrgan" in path.name) != esrgan:
        raise SrganError(
            f"--yardstick: {path.name} times {'ESRGAN' if 'esrgan' in path.name else 'SRGAN'}'s step; this config "
            f"has gan.discriminator {config.gan.discriminator} and gan.d_loss {config.gan.d_loss} (ESRGAN's: vgg "
            "and relativistic, against yardstick_esrgan.py; else yardstick_step.py)"
        )
    p = config.loss.perceptual
    layers = perceptual_layers(p)
    if esrgan:
        m = config.model
        shape = (m.arch, m.channels, m.growth, m.d_channels, p.network, list(layers), p.criterion)
        if shape != ("rrdb", 64, 32, 64, "vgg19", ["conv5_4"], "l1"):
            raise SrganError(
                "--yardstick: its step has an rrdb generator of 64 channels and growth 32, d_channels 64 and an L1 "
                f"perceptual loss on VGG19 conv5_4; this config has {m.arch}, {m.channels} channels, growth "
                f"{m.growth}, d_channels {m.d_channels}, {p.criterion} on {p.network} {', '.join(layers)}"
            )
        return True
    srgan_shape = (config.model.blocks, config.model.channels, config.model.d_channels, p.network, list(layers))
    if srgan_shape != (16, 64, 64, "vgg16", ["pool5"]):
        raise SrganError(
            "--yardstick: its step has 16 blocks, 64 channels, d_channels 64 and VGG16 pool5; this config has "
            f"{srgan_shape[0]} blocks, {srgan_shape[1]} channels, d_channels {srgan_shape[2]}, {srgan_shape[3]} "
            f"{', '.join(layers)}"
        )
    return False


def yardstick_command(path: Path, config: Config, iters: int, warmup: int, esrgan: bool = False) -> list[str]:
    """The command that times the yardstick (../shared/bench/yardstick_step.py
    or yardstick_esrgan.py) on the config's shapes; raises SrganError when
    `path` is not a file."""
    if not path.is_file():
        raise SrganError(f"--yardstick: {path}: no such file")
    return [
        sys.executable,
        str(path),
        "--batch",
        str(config.data.batch_size),
        "--crop",
        str(config.data.crop_size),
        "--scale",
        str(config.model.scale),
        "--iters",
        str(iters),
        "--warmup",
        str(warmup),
        *(["--blocks", str(config.model.blocks)] if esrgan else []),
    ]


def run_yardstick(path: Path, config: Config, iters: int, warmup: int, esrgan: bool = False) -> dict:
    """Time the yardstick's training step on the same shapes in a child process
    and return the JSON result it prints; raises SrganError when it fails or prints none."""
    done = subprocess.run(yardstick_command(path, config, iters, warmup, esrgan), capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SrganError(f"--yardstick: {path} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(lines[-1])
