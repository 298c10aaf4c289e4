"""`precision: auto` (train.precision, --precision): the precision that runs
the work at hand fastest on this machine, timed, not guessed from CPU flags.

A CPU that lists AVX512-BF16 may still run bf16 convolutions slower than
fp32 (oneDNN without AMX; docs/performance.md), and a GPU's advantage
depends on the network's widths. So auto times the work itself in each
candidate precision: for training, the generator's forward and backward
at the run's micro-batch and crop; for upscaling, the network's forward on
a tile. One warm-up pass each, then rounds that alternate the candidates
(so that a load on the machine falls on all of them), the fastest pass of
each kept. A lower precision wins only when it is faster than fp32 by
MARGIN: when they are close, fp32's accuracy is worth more than noise.

The candidates: fp32, and bf16 where the device runs it at all (oneDNN's
bf16 on the CPU, native bf16 on a GPU) and the network does (spandrel's
descriptor says). fp16 is never chosen by auto: its 5-bit exponent
overflows in GAN losses and in networks not written for it; pin it with
fp16 on CUDA.

The timings are cached (cache_file(), beside the tile pads) by a key of
the machine and the work (work_key): measuring costs once."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from srgan.files.cache import cache_file as shared_cache_file
from srgan.files.cache import read_entries, write_entries
from srgan.models.runtime import Runtime, is_out_of_memory

if TYPE_CHECKING:
    from srgan.configs.schema import Config

VERSION = "precision timing v1"  # part of the key: a changed way of timing measures again
MARGIN = 0.05  # how much faster than fp32 a lower precision must be to be chosen
ROUNDS = 3  # timed passes of each candidate, at most
BUDGET_S = 2.0  # no round starts after this much time spent timing (beyond the first round)
INFERENCE_SIDE = 64  # the input tile timed for upscaling, pixels a side (rounded up to the network's alignment)
CACHE_ENTRIES = 256  # works remembered; the oldest measured is forgotten first


@dataclass(frozen=True)
class PrecisionChoice:
    """What auto chose and why: the seconds a pass took in each candidate."""

    precision: str
    how: str  # "measured", "cached", "the run's" (a resume), or why nothing was timed
    seconds: dict[str, float]  # by candidate; {} when nothing was timed
    unit: str  # what one pass is: "a step" or "a tile"

    def describe(self) -> str:
        """`precision auto: bf16 (bf16 41 ms, fp32 67 ms a step, measured)`."""
        figures = ", ".join(f"{name} {_ms(s)}" for name, s in sorted(self.seconds.items(), key=lambda kv: kv[1]))
        inside = f"{figures} {self.unit}, {self.how}" if figures else self.how
        return f"precision auto: {self.precision} ({inside})"

    def record(self) -> dict:
        """The choice as run.json records it."""
        return {"precision": self.precision, "how": self.how, "seconds": self.seconds, "unit": self.unit}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def apply(runtime: Runtime, choice: PrecisionChoice) -> Runtime:
    """`runtime` in the chosen precision, its description saying how auto
    chose it; `runtime` itself when its precision was given."""
    if not runtime.measure:
        return runtime
    return dataclasses.replace(runtime, precision=choice.precision, measure=False, chosen=choice.describe())


def for_training(runtime: Runtime, config: Config) -> Runtime:
    """`runtime`, its precision measured (measure_training) when it is auto
    (`runtime.measure`)."""
    return apply(runtime, measure_training(runtime, config)) if runtime.measure else runtime


def measure_training(runtime: Runtime, config: Config) -> PrecisionChoice:
    """The precision that takes the generator's forward and backward at the
    run's micro-batch and crop fastest here, measured (or cached), for a run
    whose train.precision is auto. The RNGs are left as they were. Raises
    SrganError for a crop or micro-batch the network refuses."""
    from srgan.models.build import build_generator
    from srgan.models.spandrel_generator import SpandrelGenerator, check_crop

    micro = max(1, config.data.batch_size // max(1, config.train.accumulate))
    scale = config.model.scale
    side = config.data.crop_size // scale
    with _rng_kept(runtime.device):
        network = build_generator(config.model)  # its own: the run's weights and BatchNorm statistics stay untouched
        if isinstance(network, SpandrelGenerator):
            check_crop(config, network)  # its refusal, not the network's traceback
        network = runtime.place(network).train()
        lr = runtime.tensor(torch.rand(micro, 3, side, side))
        hr = runtime.tensor(torch.rand(micro, 3, side * scale, side * scale))

        def step(candidate: Runtime) -> None:
            with candidate.autocast():
                loss = F.l1_loss(network(lr).float(), hr)
            loss.backward()
            for parameter in network.parameters():
                parameter.grad = None

        work = {"work": "train", "network": structure_key(network), "input": list(lr.shape)}
        return choose(runtime, network, work, step, "a step")


def for_inference(runtime: Runtime, network: nn.Module) -> Runtime:
    """The runtime to upscale with `network` (placed on runtime's device)
    when --precision is auto (`runtime.measure`): the precision whose
    forward on a tile is fastest here, measured (or cached); `runtime`
    itself when the precision was given. The network is not changed."""
    if not runtime.measure:
        return runtime
    align = max(1, int(getattr(network, "tile_align", 1) or 1))
    side = -(-INFERENCE_SIDE // align) * align
    with _rng_kept(runtime.device):
        x = runtime.tensor(torch.rand(1, 3, side, side))
    was_training = network.training
    network.eval()

    def forward(candidate: Runtime) -> None:
        with torch.inference_mode(), candidate.autocast():
            network(x)

    try:
        work = {"work": "upscale", "network": structure_key(network), "input": list(x.shape)}
        choice = choose(runtime, network, work, forward, "a tile")
    finally:
        network.train(was_training)
    return apply(runtime, choice)


def choose(
    runtime: Runtime, network: nn.Module, work: dict, run_once: Callable[[Runtime], None], unit: str
) -> PrecisionChoice:
    """The candidate that runs `run_once` fastest: from the cache when this
    machine timed this `work` before, else timed now and cached."""
    names = candidates(runtime.device, network)
    if names == ["fp32"]:
        return PrecisionChoice("fp32", "the only candidate here", {}, unit)
    key = work_key(runtime, work)
    path = cache_file()
    entries = read_entries(path, "timings", "precision cache")
    cached = _entry(entries.get(key), names)
    if cached is not None:
        return PrecisionChoice(pick(cached), "cached", cached, unit)
    seconds = time_candidates(runtime, names, run_once)
    if "fp32" not in seconds:  # fp32 ran out of memory: nothing to compare with; fp32 fails alike in the run
        return PrecisionChoice("fp32", "not measured: out of memory", seconds, unit)
    entries.pop(key, None)
    entries[key] = {"seconds": seconds, "machine": machine(runtime.device), "torch": torch.__version__, **work}
    header = {"srgan_precision_timings": 1, "version": VERSION}
    write_entries(path, header, "timings", entries, CACHE_ENTRIES, "precision")
    return PrecisionChoice(pick(seconds), "measured", seconds, unit)


def pick(seconds: dict[str, float]) -> str:
    """fp32, unless another candidate is faster than it by MARGIN: then the fastest."""
    fastest = min(seconds, key=lambda name: seconds[name])
    return fastest if seconds[fastest] < seconds["fp32"] * (1 - MARGIN) else "fp32"


def candidates(device: torch.device, network: nn.Module) -> list[str]:
    """fp32, and bf16 where the device and the network run it (module docstring)."""
    if device.type == "cuda":
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    elif device.type == "cpu":
        probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        bf16 = torch.backends.mkldnn.is_available() and (probe is None or bool(probe()))
    else:
        bf16 = False
    declared = getattr(network, "low_precision", {})  # spandrel's networks say what they run in
    return ["fp32", "bf16"] if bf16 and declared.get(torch.bfloat16, True) else ["fp32"]


def time_candidates(runtime: Runtime, names: list[str], run_once: Callable[[Runtime], None]) -> dict[str, float]:
    """The fastest pass of each candidate, in seconds (module docstring); a
    candidate that runs out of memory is left out."""
    runs = {name: dataclasses.replace(runtime, precision=name, measure=False) for name in names}
    best: dict[str, float] = {}
    for name in list(runs):  # the warm-up: kernels chosen, caches filled, memory allocated
        try:
            _timed(runs[name], run_once)
            best[name] = math.inf
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
            del runs[name]
            _release(runtime.device)
    began = time.perf_counter()
    for n in range(ROUNDS):
        if n and time.perf_counter() - began > BUDGET_S:
            break
        for name, candidate in runs.items():
            best[name] = min(best[name], _timed(candidate, run_once))
    return {name: round_seconds(s) for name, s in best.items()}


def round_seconds(seconds: float) -> float:
    return float(f"{seconds:.4g}")


def _timed(candidate: Runtime, run_once: Callable[[Runtime], None]) -> float:
    _synchronize(candidate.device)
    start = time.perf_counter()
    run_once(candidate)
    _synchronize(candidate.device)
    return time.perf_counter() - start


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _release(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _rng_kept(device: torch.device) -> contextlib.AbstractContextManager:
    """The RNGs (torch's, and CUDA's on that device) as they were, after the
    block: the timing's random inputs and weights draw nothing from a run's
    stream."""
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])


def structure_key(network: nn.Module) -> str:
    """sha256 of what decides the network's cost: its class, architecture
    and scale and the names, dtypes and shapes of its weights, not their
    values (two fine-tunes of one architecture run at one speed)."""
    digest = hashlib.sha256(f"{type(network).__name__}\n{getattr(network, 'arch', '')}\n".encode())
    digest.update(f"{getattr(network, 'scale', '')}\n".encode())
    for name, tensor in network.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
    return digest.hexdigest()


def work_key(runtime: Runtime, work: dict) -> str:
    """The cache key: sha256 of the machine (machine()), torch's version,
    the threads and the memory layout, and the work (training or upscaling,
    the network's structure, the input's shape). Each can turn the answer:
    which kernels oneDNN or cuDNN run depends on the instruction set and the
    card and changes between torch releases; bf16 pays for wide layers and
    large inputs and loses on narrow ones, so one network's answer does not
    hold for another's; more threads speed the two precisions unequally."""
    parts = {
        "version": VERSION,
        "machine": machine(runtime.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads() if runtime.device.type == "cpu" else None,
        "channels_last": runtime.channels_last,
        **work,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def machine(device: torch.device) -> str:
    """The device as the timings depend on it: the GPU's name and compute
    capability, or the CPU's model name and its flags' digest (what oneDNN
    chooses its kernels by; a hypervisor can hide some of a model's flags)."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} (sm {major}{minor})"
    model, flags = cpu_identity()
    return f"{model} (flags {hashlib.sha256(flags.encode()).hexdigest()[:16]})"


def cpu_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, str]:
    """The CPU's model name and flags from `cpuinfo` (the first processor's);
    the platform's processor name and "" where the file is not there."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return platform.processor() or platform.machine(), ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip(), value.strip())
    model = fields.get("model name") or fields.get("Model") or platform.processor() or platform.machine()
    flags = fields.get("flags") or fields.get("Features") or ""  # x86, ARM
    return model, flags


def cache_file() -> Path:
    """$XDG_CACHE_HOME/srgan/precision.json, beside tile_pads.json."""
    return shared_cache_file("precision.json")


def _entry(value: object, names: list[str]) -> dict[str, float] | None:
    """A cache entry's seconds by candidate, or None for one that does not
    hold up (not every candidate, or a time that is not a positive number)."""
    if not isinstance(value, dict) or not isinstance(value.get("seconds"), dict):
        return None
    seconds = value["seconds"]
    if set(seconds) != set(names):
        return None
    for s in seconds.values():
        if isinstance(s, bool) or not isinstance(s, int | float) or not math.isfinite(s) or s <= 0:
            return None
    return {name: float(seconds[name]) for name in names}
