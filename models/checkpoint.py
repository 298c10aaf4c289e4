"""Checkpoints: a dict of tensors and plain values, written atomically,
read back with `weights_only=True` (no pickled code runs on load)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from srgan.configs.errors import SrganError
from srgan.models.generator import Generator
from srgan.models.leftthomas import generator_from_leftthomas, is_leftthomas_state_dict

# What every srgan checkpoint holds (training adds more: schedulers, RNG states, ...).
REQUIRED_KEYS = ("generator", "discriminator", "optimizer_g", "optimizer_d", "epoch", "step", "config")


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write to a temporary file beside `path`, flush it to disk, then rename:
    a crash mid-write leaves the previous checkpoint intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def resolve_checkpoint_path(path: str | Path) -> Path:
    """A checkpoint file, or a run folder (its checkpoints/last.pt)."""
    path = Path(path)
    if path.is_dir():
        for candidate in (path / "checkpoints" / "last.pt", path / "last.pt"):
            if candidate.is_file():
                return candidate
        raise SrganError(f"{path}: a folder with no checkpoints/last.pt (expected a run folder or a .pt file)")
    if not path.is_file():
        raise SrganError(f"{path}: no such checkpoint file or run folder")
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`, or explain why not."""
    path = resolve_checkpoint_path(path)
    state = _read_torch_file(path)
    if not is_srgan_checkpoint(state):
        raise SrganError(f"{path}: not an srgan checkpoint (expected the keys {', '.join(REQUIRED_KEYS)})")
    return state


def load_generator(path: str | Path) -> Generator:
    """The generator of an srgan checkpoint (file or run folder), or of a bare
    leftthomas/SRGAN generator state dict (its netG_epoch_*.pth files)."""
    path = resolve_checkpoint_path(path)
    state = _read_torch_file(path)
    if is_srgan_checkpoint(state):
        return generator_from_checkpoint(state, str(path))
    if is_leftthomas_state_dict(state):
        return generator_from_leftthomas(state, str(path))
    raise SrganError(
        f"{path}: not an srgan checkpoint (expected the keys {', '.join(REQUIRED_KEYS)}) "
        "nor a leftthomas/SRGAN generator state dict (block1.0.weight, block2.conv1.weight, ...)"
    )


def is_srgan_checkpoint(state: Any) -> bool:
    return isinstance(state, dict) and "generator" in state and "config" in state


def _read_torch_file(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # truncated zip, not a torch file, unpicklable content...
        text = str(error).strip().splitlines()
        reason = f"{error.__class__.__name__}: {text[0][:160]}" if text else error.__class__.__name__
        raise SrganError(f"{path}: not a readable checkpoint ({reason})") from None


def generator_from_checkpoint(state: dict[str, Any], origin: str = "checkpoint") -> Generator:
    """The generator described by the checkpoint's own config, with its weights
    (the EMA weights when the run kept them)."""
    model = state["config"].get("model", {}) if isinstance(state["config"], dict) else {}
    try:
        generator = Generator(int(model["scale"]), int(model["blocks"]), int(model["channels"]))
    except (KeyError, TypeError, ValueError):
        raise SrganError(f"{origin}: its config has no valid model.scale, model.blocks, model.channels") from None
    weights = state.get("generator_ema") or state["generator"]
    try:
        generator.load_state_dict(weights)
    except RuntimeError as error:
        first = str(error).strip().splitlines()[0]
        raise SrganError(f"{origin}: generator weights do not fit its config ({first})") from None
    return generator
