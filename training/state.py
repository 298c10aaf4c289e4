"""What a checkpoint holds, the checks that it holds what a resume needs,
and how a run comes back from it. models/checkpoint.py checks the generator
and its config, for every reader of a generator alike."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srgan.configs import Config, config_from_dict, config_to_dict
from srgan.configs.schema import METRIC_NAMES
from srgan.files import read_torch_file
from srgan.files.errors import SrganError
from srgan.metrics import metric_columns, worst_score
from srgan.models.build import ARCHITECTURE_KEYS
from srgan.models.checkpoint import (
    check_finite,
    check_generator_state,
    check_state_dict,
    is_srgan_checkpoint,
    resolve_checkpoint_path,
)
from srgan.models.discriminator import build_discriminator
from srgan.training.distributed import unwrap
from srgan.training.ema import GeneratorEMA
from srgan.training.rng import as_tuples, rng_state, set_rng_state
from srgan.training.step import TrainingParts

METRIC_COLUMNS = metric_columns(METRIC_NAMES)  # every score a validation may record

# What every srgan checkpoint that a run can resume from holds (it may hold
# more: generator_ema, scaler, rng, metrics, the validation counters).
REQUIRED_KEYS = ("generator", "discriminator", "optimizer_g", "optimizer_d", "epoch", "step", "config")


@dataclass
class Progress:
    """Where a run is: restored on resume, saved in every checkpoint."""

    step: int = 0
    epoch: int = 1  # the epoch under way (or just finished)
    # Keys of the epoch's data order consumed (a step takes batch_size x ranks):
    # counted in keys, not steps, so that a run resumes where it stopped on
    # another number of ranks.
    epoch_keys: int = 0
    best_by: str = "psnr"  # the metric (train.best_by) that best_value and best.pt follow
    best_value: float = float("-inf")  # its best validation so far (inf for a lower-is-better one: none yet)
    best_step: int = 0
    metric_state: dict = field(default_factory=dict)
    # The last step whose validation, and whose end-of-epoch work (validation,
    # epochs.csv row, pictures), is done: a checkpoint written just before that
    # work (so that a crash in it loses nothing) says it is still to do.
    validated_step: int = -1
    closed_step: int = -1
    last_validation: dict = field(default_factory=dict)  # step, each val metric, best (improved on the best before)
    wall_seconds: float = 0.0  # time spent training, over all the sessions of the run
    # The crops a forward takes (train.micro_batch as planned or halved after
    # an out-of-memory error; 0: not yet planned), and its changes mid-run:
    # kept so that a resumed run sums the same micro-batches.
    micro_batch: int = 0
    micro_batch_changes: list = field(default_factory=list)  # {"step", "micro_batch"}: the step rerun at it


def checkpoint_state(parts: TrainingParts, ema: GeneratorEMA | None, config: Config, progress: Progress) -> dict:
    state = {  # the bare networks' state dicts: they load in one process or under DDP alike
        "generator": unwrap(parts.generator).state_dict(),
        "discriminator": unwrap(parts.discriminator).state_dict(),
        "optimizer_g": parts.optimizer_g.state_dict(),
        "optimizer_d": parts.optimizer_d.state_dict(),
        "scaler": parts.scaler.state_dict(),
        "epoch": progress.epoch,
        "epoch_keys": progress.epoch_keys,
        "step": progress.step,
        "best_by": progress.best_by,
        "best_value": progress.best_value,
        "best_step": progress.best_step,
        "metrics": progress.metric_state,
        "validated_step": progress.validated_step,
        "closed_step": progress.closed_step,
        "last_validation": progress.last_validation,
        "wall_seconds": progress.wall_seconds,
        "micro_batch": progress.micro_batch,
        "micro_batch_changes": progress.micro_batch_changes,
        "rng": rng_state(),
        "config": config_to_dict(config),
    }
    if ema is not None:
        state["generator_ema"] = ema.model.state_dict()
    return state


# The generator as the PSNR phase (train.pretrain_steps) leaves it, beside last.pt:
# one run gives both ends of `srgan interpolate` (docs/interpolate.md).
PRETRAINED_NAME = "pretrained.pt"


def pretrained_state(parts: TrainingParts, ema: GeneratorEMA | None, config: Config, step: int) -> dict:
    """The generator-only checkpoint of checkpoints/pretrained.pt: the
    generator (and its EMA), the run's config and the step, what every
    reader of a generator file takes (not a resume: nothing of D, the
    optimizers or the RNG)."""
    state = {"generator": unwrap(parts.generator).state_dict(), "config": config_to_dict(config), "step": step}
    if ema is not None:
        state["generator_ema"] = ema.model.state_dict()
    return state


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint at `path` (a .pt file, or a run folder's
    checkpoints/last.pt), checked to hold everything a resume needs
    (check_checkpoint). Raises SrganError for a file that is not an srgan
    checkpoint or that fails a check, naming the file and the key."""
    path = resolve_checkpoint_path(path)
    state = read_torch_file(path)
    if not is_srgan_checkpoint(state):
        raise SrganError(f"{path}: not an srgan checkpoint (expected the keys {', '.join(REQUIRED_KEYS)})")
    check_checkpoint(state, str(path))
    return state


def check_checkpoint(state: dict[str, Any], origin: str) -> None:
    """Raise SrganError naming the first thing wrong with `state` for a
    resume: the generator and config (check_generator_state), then the
    REQUIRED_KEYS, the discriminator's weights, the optimizers', RNG and
    logs' states and the progress counters."""
    run_config, generator = check_generator_state(state, origin)
    missing = [key for key in REQUIRED_KEYS if key not in state]
    if missing:
        raise SrganError(f"{origin}: lacks {', '.join(missing)}, which resuming needs")
    with torch.device("meta"):  # shapes only: nothing is allocated
        discriminator = build_discriminator(run_config)
    check_state_dict(state["discriminator"], discriminator, f"{origin}: discriminator")
    check_adam_state(state["optimizer_g"], generator, f"{origin}: optimizer_g")
    check_adam_state(state["optimizer_d"], discriminator, f"{origin}: optimizer_d")
    for key, least in (
        ("step", 0),
        ("epoch", 1),
        ("epoch_keys", 0),
        ("best_step", 0),
        ("validated_step", -1),
        ("closed_step", -1),
        ("micro_batch", 0),
    ):
        value = state.get(key, least)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SrganError(f"{origin}: {key}: expected an integer of at least {least}, got {value!r}")
    for key in ("best_psnr", "best_value", "wall_seconds"):  # best_psnr: checkpoints from before best_by
        if isinstance(state.get(key), bool) or not isinstance(state.get(key, 0.0), (int, float)):
            raise SrganError(f"{origin}: {key}: expected a number, got {state[key]!r}")
    if state.get("best_by", "psnr") not in METRIC_NAMES:
        raise SrganError(f"{origin}: best_by: expected one of {', '.join(METRIC_NAMES)}, got {state['best_by']!r}")
    if not isinstance(state.get("scaler", {}), dict):
        raise SrganError(f"{origin}: scaler: expected a mapping")
    last = state.get("last_validation", {})
    if last and not (
        isinstance(last, dict)
        and isinstance(last.get("step"), int)
        and isinstance(last.get("best"), (int, float))
        and all(
            k in METRIC_COLUMNS and isinstance(v, (int, float)) for k, v in last.items() if k not in ("step", "best")
        )
    ):
        raise SrganError(f"{origin}: last_validation: expected step, best and the metrics' numbers")
    check_metric_state(state.get("metrics", {}), f"{origin}: metrics")
    changes = state.get("micro_batch_changes", [])
    if not isinstance(changes, list) or not all(
        isinstance(c, dict) and all(isinstance(c.get(k), int) for k in ("step", "micro_batch")) for c in changes
    ):
        raise SrganError(f"{origin}: micro_batch_changes: expected a list of step and micro_batch integers")
    if "rng" in state:
        check_rng_state(state["rng"], f"{origin}: rng")


def check_adam_state(state: Any, module: torch.nn.Module, origin: str) -> None:
    """Raise SrganError, naming `origin`, unless `state` is an Adam state_dict
    for `module`'s parameters, in their order, with finite moments."""
    shapes = [p.shape for p in module.parameters()]
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("state"), dict)
        or not isinstance(state.get("param_groups"), list)
    ):
        raise SrganError(f"{origin}: expected an optimizer state (state, param_groups)")
    indices = []
    for group in state["param_groups"]:
        if not isinstance(group, dict) or not isinstance(group.get("params"), list):
            raise SrganError(f"{origin}: param_groups: expected mappings with a list of params")
        indices += group["params"]
    if sorted(indices) != list(range(len(shapes))):
        raise SrganError(f"{origin}: holds {len(indices)} parameters, the config's network has {len(shapes)}")
    for index, entry in state["state"].items():
        if not isinstance(index, int) or not 0 <= index < len(shapes) or not isinstance(entry, dict):
            raise SrganError(f"{origin}: state: unexpected entry {index!r}")
        for name in ("exp_avg", "exp_avg_sq"):
            value = entry.get(name)
            if not isinstance(value, torch.Tensor) or value.shape != shapes[index]:
                raise SrganError(
                    f"{origin}: state {index}: {name} does not match its parameter's shape {list(shapes[index])}"
                )
        if not isinstance(entry.get("step"), (torch.Tensor, int, float)):
            raise SrganError(f"{origin}: state {index}: lacks its step count")
        check_finite({f"state {index}": entry["exp_avg"], f"state {index} sq": entry["exp_avg_sq"]}, origin)


def check_rng_state(rng: Any, origin: str) -> None:
    """Raise SrganError unless each generator state loads into a scratch generator of its kind."""
    if not isinstance(rng, dict) or not {"python", "numpy", "torch"} <= set(rng):
        raise SrganError(f"{origin}: expected the python, numpy and torch generator states")
    try:
        random.Random().setstate(as_tuples(rng["python"]))
    except (TypeError, ValueError, OverflowError):
        raise SrganError(f"{origin}: python: not a state of Python's random generator") from None
    try:
        kind, keys, *rest = rng["numpy"]
        np.random.RandomState().set_state((kind, np.array(keys, dtype=np.uint32), *rest))
    except (TypeError, ValueError, OverflowError):
        raise SrganError(f"{origin}: numpy: not a state of NumPy's random generator") from None
    try:
        if not isinstance(rng["torch"], torch.Tensor):
            raise TypeError
        torch.Generator().set_state(rng["torch"])
    except (TypeError, RuntimeError):
        raise SrganError(f"{origin}: torch: not a state of torch's random generator") from None


def check_metric_state(metrics: Any, origin: str) -> None:
    """Raise SrganError unless `metrics` holds the epoch's running sums and
    counts of the logged values (see training/logs.py)."""
    ok = isinstance(metrics, dict) and all(
        isinstance(metrics.get(part, {}), dict)
        and all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in metrics.get(part, {}).items()
        )
        for part in ("sums", "counts")
    )
    if not ok:
        raise SrganError(f"{origin}: expected sums and counts of the logged values")


def restore(state: dict, parts: TrainingParts, ema: GeneratorEMA | None, best_by: str = "psnr") -> Progress:
    """Load a checkpoint's weights, optimizer states and RNG states into the
    parts (a checkpoint that load_checkpoint checked: it fits them). The best
    so far is kept when it was of `best_by` (checkpoints from before
    train.best_by hold best_psnr alone); under another metric it starts over."""
    unwrap(parts.generator).load_state_dict(state["generator"])
    unwrap(parts.discriminator).load_state_dict(state["discriminator"])
    parts.optimizer_g.load_state_dict(state["optimizer_g"])
    parts.optimizer_d.load_state_dict(state["optimizer_d"])
    if state.get("scaler"):
        parts.scaler.load_state_dict(state["scaler"])
    if ema is not None:
        ema.model.load_state_dict(state.get("generator_ema") or state["generator"])
    if "rng" in state:
        set_rng_state(state["rng"])
    return Progress(
        step=state["step"],
        epoch=state["epoch"],
        epoch_keys=state.get("epoch_keys", 0),
        best_by=best_by,
        best_value=float(state.get("best_value", state.get("best_psnr", float("-inf"))))
        if state.get("best_by", "psnr") == best_by
        else worst_score(best_by),
        best_step=state.get("best_step", 0) if state.get("best_by", "psnr") == best_by else 0,
        metric_state=state.get("metrics", {}),
        validated_step=state.get("validated_step", state["step"]),
        closed_step=state.get("closed_step", state["step"]),
        last_validation=state.get("last_validation", {}),
        wall_seconds=float(state.get("wall_seconds", 0.0)),
        micro_batch=state.get("micro_batch", 0),
        micro_batch_changes=list(state.get("micro_batch_changes", [])),
    )


def check_same_architecture(saved: dict, config: Config, origin: str) -> None:
    """Raise SrganError, saying what differs, when the checkpoint's networks
    have another shape than `config` asks for (`saved`: a checked
    checkpoint's config; its missing keys take the defaults)."""
    saved_config = config_from_dict(saved, origin)
    theirs = saved_config.model
    differences = [
        f"model.{key} {getattr(theirs, key)!r} -> {getattr(config.model, key)!r}"
        for key in ARCHITECTURE_KEYS
        if getattr(theirs, key) != getattr(config.model, key)
    ]
    # the discriminator's kind, and for vgg the crop its dense layer is sized for
    if saved_config.gan.discriminator != config.gan.discriminator:
        differences.append(f"gan.discriminator {saved_config.gan.discriminator!r} -> {config.gan.discriminator!r}")
    elif config.gan.discriminator == "vgg" and saved_config.data.crop_size != config.data.crop_size:
        differences.append(
            f"data.crop_size {saved_config.data.crop_size!r} -> {config.data.crop_size!r} "
            "(the vgg discriminator's dense layer is sized by it)"
        )
    if differences:
        raise SrganError(f"{origin}: the checkpoint's networks differ from this config: {', '.join(differences)}")


def changed_settings(saved: dict, config: Config) -> list[str]:
    """Dotted keys whose values differ between a checkpoint's config and this one."""
    changes: list[str] = []

    def walk(old, new, prefix):
        for key, value in new.items():
            if isinstance(value, dict) and isinstance(old.get(key), dict):
                walk(old[key], value, f"{prefix}{key}.")
            elif old.get(key) != value:
                changes.append(f"{prefix}{key} {old.get(key)!r} -> {value!r}")

    walk(saved, config_to_dict(config), "")
    return changes
