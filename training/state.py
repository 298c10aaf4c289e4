"""What a checkpoint holds and how a run comes back from it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np
import torch

from srgan.configs import Config, config_from_dict, config_to_dict
from srgan.files.errors import SrganError
from srgan.metrics import worst_score
from srgan.models.checkpoint import as_tuples
from srgan.training.distributed import unwrap
from srgan.training.ema import GeneratorEMA
from srgan.training.step import TrainingParts

# Keys of model.* that fix the shapes of the weights.
ARCHITECTURE_KEYS = ("arch", "scale", "blocks", "channels", "growth", "d_channels", "norm", "residual", "res_scale")


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
        "rng": rng_state(),
        "config": config_to_dict(config),
    }
    if ema is not None:
        state["generator_ema"] = ema.model.state_dict()
    return state


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
    )


def check_same_architecture(saved: dict, config: Config, origin: str) -> None:
    """Refuse to resume into networks of another shape, saying what differs
    (`saved`: a checked checkpoint's config; its missing keys take the defaults)."""
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


def rng_state() -> dict:
    numpy_state = np.random.get_state()
    assert isinstance(numpy_state, tuple)  # legacy=True, the default: MT19937's tuple
    state = {
        "python": random.getstate(),
        "numpy": [numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(as_tuples(state["python"]))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
