"""How many crops each forward and backward of a step takes: the
micro-batch (train.micro_batch), planned from the memory at hand before the
first step and halved when a step runs out of memory (docs/training.md
"Memory"). data.batch_size stays the batch each update sees: the step sums
batch / micro-batch micro-batches (step.py).

The plan measures trial steps on copies of the networks and fresh optimizers
with every RNG stream saved and restored around them, so that planning
changes no bit of the run: a run that planned a micro-batch equals the run
that named it."""

from __future__ import annotations

import copy
import dataclasses
import gc
import math
import weakref
from dataclasses import dataclass

import torch

from srgan.configs import Config
from srgan.files.errors import SrganError
from srgan.models.memory import available_bytes, measure_peak, status_bytes
from srgan.models.runtime import is_out_of_memory
from srgan.training.distributed import unwrap
from srgan.training.rng import rng_state, set_rng_state
from srgan.training.step import TrainingParts, gan_step, generator_step

# The share of the memory at hand a planned step may take at its peak: the
# rest is for what a trial does not see (the loader's batches, the
# allocator's fragments, the EMA's and validation's tensors).
MARGIN = 0.85
GIB = 1024**3


@dataclass
class Plan:
    """The micro-batch a run takes, and how it was chosen: measured (with
    the step's predicted peak and the memory at hand, in bytes), pinned by
    the config, kept from the checkpoint, or the whole batch where the
    memory cannot be read."""

    micro_batch: int
    batch: int
    how: str  # measured, pinned, resumed, unmeasured
    peak: int | None = None
    available: int | None = None
    least: int = 1  # the smallest micro-batch the networks train on: halving stops there

    @property
    def accumulate(self) -> int:
        return self.batch // self.micro_batch

    def describe(self) -> str:
        """`micro-batch 4 x 4 (peak 9.1 of 10.0 GiB)`: the start-up line."""
        text = f"micro-batch {self.micro_batch} x {self.accumulate}"
        if self.how == "measured" and self.peak is not None and self.available is not None:
            return f"{text} (peak {self.peak / GIB:.2f} of {self.available / GIB:.2f} GiB)"
        return f"{text} ({self.how})"

    def record(self) -> dict:
        """run.json's account of the plan."""
        return {
            "micro_batch": self.micro_batch,
            "accumulate": self.accumulate,
            "how": self.how,
            "peak_bytes": self.peak,
            "available_bytes": self.available,
        }


def pinned_micro_batch(config: Config) -> int | None:
    """The micro-batch the config names (train.micro_batch N, or
    train.accumulate > 1 with micro_batch auto); None for auto. The loader
    checked that they agree and divide data.batch_size."""
    t, batch = config.train, config.data.batch_size
    if t.micro_batch != "auto":
        return t.micro_batch
    return batch // t.accumulate if t.accumulate > 1 else None


def plan_micro_batch(config: Config, parts: TrainingParts, gan: bool) -> Plan:
    """The largest micro-batch that divides data.batch_size and whose step's
    peak, fitted as a + b x samples from trial steps on 1 and 2 crops, fits
    MARGIN of the memory at hand (one trial when its bound says the whole
    batch fits). Raises SrganError, naming the crop, the memory and the
    largest crop estimated to fit, when one crop does not."""
    batch, device = config.data.batch_size, parts.runtime.device
    pinned = pinned_micro_batch(config)
    if pinned is not None:
        return Plan(pinned, batch, "pinned", least=least_micro_batch(parts))
    available = available_bytes(device)
    if available is None:
        return Plan(batch, batch, "unmeasured", least=least_micro_batch(parts))
    budget = int(available * MARGIN)
    crop, least = config.data.crop_size, least_micro_batch(parts)
    try:
        first = fit_peak(parts, config, gan, crop, (least,))
    except ValueError as error:  # a BatchNorm on 1x1 features (VGG/U-Net D at a small crop) needs 2 samples
        if least > 1 or batch < 2 or "Expected more than 1 value per channel" not in str(error):
            raise
        least = 2
        first = fit_peak(parts, config, gan, crop, (least,))
    # A peak a + b x crops with a fixed part a >= 0 is at most peak(least) x
    # batch / least: when that fits, the whole batch does, and one trial
    # (the planning's cost at start-up: docs/performance.md) decides.
    if first is not None and first[0] * batch / least <= budget:
        return Plan(batch, batch, "measured", peak=int(first[0] * batch / least), available=available, least=least)
    fit = fit_peak(parts, config, gan, crop, tuple(n for n in (least, 2 * least) if n <= batch))
    if fit is None or fit[0] + fit[1] * least > budget:
        raise SrganError(refusal(parts, config, gan, budget, available, fit))
    a, b = fit
    micro = max(n for n in range(least, batch + 1) if batch % n == 0 and a + b * n <= budget)
    return Plan(micro, batch, "measured", peak=int(a + b * micro), available=available, least=least)


def refusal(
    parts: TrainingParts, config: Config, gan: bool, budget: int, available: int, fit: tuple[float, float] | None
) -> str:
    """Why one crop does not fit, with the largest crop a fit (at the crop,
    else at smaller trial crops) estimates to fit: activations grow with the
    crop's pixels, the rest (weights, optimizer moments) does not."""
    crop, scale = config.data.crop_size, config.model.scale
    trial_crop = crop
    while fit is None and trial_crop // 2 >= 4 * scale:
        trial_crop = (trial_crop // 2) // scale * scale
        fit = fit_peak(parts, config, gan, trial_crop, (least_micro_batch(parts),))
    head = (
        f"data.crop_size {crop}: one crop's training step does not fit the memory at hand "
        f"({available / GIB:.2f} GiB on {parts.runtime.device}, {MARGIN:.0%} of it planned)"
    )
    if fit is None:
        return f"{head}; not even a {trial_crop} px crop fits: a smaller network (model.blocks/channels) may"
    a, b = fit
    least = least_micro_batch(parts)
    if a >= budget:
        return f"{head}: the networks and optimizers alone take {a / GIB:.2f} GiB; a smaller network may fit"
    largest = int(trial_crop * math.sqrt((budget - a) / (b * least))) // scale * scale if b > 0 else crop
    peak = f"{(a + b * least * (crop / trial_crop) ** 2) / GIB:.2f}"
    return f"{head} (its peak: about {peak} GiB); the largest crop that fits is about {largest} px"


def fit_peak(
    parts: TrainingParts, config: Config, gan: bool, crop: int, counts: tuple[int, ...]
) -> tuple[float, float] | None:
    """(a, b): a step's peak bytes as a + b x samples at `crop`, from trial
    steps on each of `counts` crops (one or two counts, the smallest first);
    None when the first trial runs out of memory. b is 0 from a single trial."""
    base = status_bytes("VmRSS") if parts.runtime.device.type == "cpu" else None
    peaks: list[tuple[int, int]] = []
    for samples in counts:
        peak = trial_peak(parts, config, gan, crop, samples, base)
        if peak is None:
            if not peaks:
                return None
            break
        peaks.append((samples, peak))
    if len(peaks) == 1:
        return float(peaks[0][1]), 0.0
    (n1, p1), (n2, p2) = peaks
    b = max(p2 - p1, 0) / (n2 - n1)
    return float(p1 - b * n1), float(b)


def least_micro_batch(parts: TrainingParts) -> int:
    """The smallest micro-batch the generator trains on (DAT's BatchNorm needs 2: models/spandrel_archs.py)."""
    return getattr(unwrap(parts.generator), "min_batch", 1)


def smaller_micro_batch(batch: int, current: int, least: int) -> int | None:
    """The largest divisor of `batch` from `least` to half of `current`; None when there is none."""
    return max((n for n in range(least, current // 2 + 1) if batch % n == 0), default=None)


def trial_peak(
    parts: TrainingParts, config: Config, gan: bool, crop: int, samples: int, base: int | None
) -> int | None:
    """The peak bytes of one step on `samples` crops of `crop` px, run on
    copies of the networks with fresh optimizers (the run's weights and
    moments untouched), the RNG streams restored after; None when it runs
    out of memory. On the CPU the peak counts from `base`, the resident set
    before the first trial (memory an earlier trial freed is reused, so the
    growth in this trial alone would miss it), less the copies' own weights."""
    device = parts.runtime.device
    saved = rng_state()
    held: list[weakref.ref] = []  # the trial's networks and optimizers
    try:
        before, peak, copies = run_trial(parts, config, gan, crop, samples, held)
    except (MemoryError, RuntimeError) as error:
        if not is_out_of_memory(error):
            raise
        before, peak, copies = None, None, 0
    finally:
        set_rng_state(saved)
    # Reference counting frees the trial's copies as run_trial returns. A full
    # collection (0.15 s with torch loaded: half the demo's planning) runs
    # only where a reference cycle still holds one, which the run's step would
    # otherwise find in memory beside its own.
    if not held or any(ref() is not None for ref in held):
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if peak is not None and base is not None and before is not None:
        peak = max(0, peak + before - base - copies)
    return peak


def run_trial(
    parts: TrainingParts, config: Config, gan: bool, crop: int, samples: int, held: list[weakref.ref]
) -> tuple[int | None, int | None, int]:
    """trial_peak's step: the resident bytes before it (CPU; else None), its
    peak (measure_peak's) and the bytes of the networks' copies; `held` gets
    weak references to the copies and their optimizers."""
    scale = config.model.scale
    trial = copy_parts(parts)
    held.extend(weakref.ref(o) for o in (trial.generator, trial.discriminator, trial.optimizer_g, trial.optimizer_d))
    lr = parts.runtime.tensor(torch.rand(samples, 3, crop // scale, crop // scale))
    hr = parts.runtime.tensor(torch.rand(samples, 3, crop, crop))
    networks = (trial.generator, trial.discriminator)
    copies = sum(t.numel() * t.element_size() for m in networks for t in m.state_dict().values())

    def step() -> object:
        return gan_step(trial, lr, hr) if gan else generator_step(trial, lr, hr)

    before = status_bytes("VmRSS") if parts.runtime.device.type == "cpu" else None
    _, peak = measure_peak(parts.runtime.device, step)
    return before, peak, copies


def copy_parts(parts: TrainingParts) -> TrainingParts:
    """The step's parts with copies of the networks (eager, in training mode)
    and new optimizers and scaler of the same settings; the criterion, whose
    weights are frozen, shared; one micro-batch."""
    generator, discriminator = copy.deepcopy(parts.generator), copy.deepcopy(parts.discriminator)
    for module in (generator, discriminator):
        module._compiled_call_impl = None  # a trial has no time to compile
        module.train()
    # The rest as the run's (the EMA generator is evaluated without gradient:
    # sharing it changes nothing). Its first GAN step runs R1 when gan.r1 is
    # on: the trial measures the step with the penalty, the largest.
    return dataclasses.replace(
        parts,
        generator=generator,
        discriminator=discriminator,
        optimizer_g=type(parts.optimizer_g)(generator.parameters(), **parts.optimizer_g.defaults),
        optimizer_d=type(parts.optimizer_d)(discriminator.parameters(), **parts.optimizer_d.defaults),
        scaler=torch.amp.GradScaler(parts.runtime.device.type, enabled=parts.scaler.is_enabled()),
        accumulate=1,
    )
