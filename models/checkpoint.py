"""Checkpoints: a dict of tensors and plain values, written atomically, read
back with `weights_only=True` (no pickled code runs on load) and checked
once, here, so that the rest of the program can trust what it holds.

A checkpoint is a file anyone may hand us: its config's sizes are checked
against the config limits before a network is built, its tensors against the
shapes that config implies (on the meta device: nothing is allocated), and
its numbers for finiteness. Every state dict read (a foreign one before a
recogniser reads a shape from it) is first checked from its tensors'
metadata alone (check_tensors): dtypes, repeated (stride-0) storage, and the
count of numbers. The first problem found is reported, naming the file and
the key."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from srgan.configs import Config, config_from_dict
from srgan.configs.checks import MAX_GENERATOR_PARAMETERS
from srgan.configs.schema import ARCH_KEYS, METRIC_NAMES, ModelConfig
from srgan.files import looks_like_safetensors, parse_json, read_safetensors_file, read_torch_file, write_file
from srgan.files.errors import SrganError, first_line
from srgan.files.reading import not_found
from srgan.models.build import SRGenerator, build_generator
from srgan.models.community import (
    NotAnSrganGenerator,
    Recognised,
    describe,
    recognise,
    recognise_discriminator,
    unwrap_state_dict,
)
from srgan.models.discriminator import build_discriminator
from srgan.models.spandrel_generator import spandrel_generator

# What every srgan checkpoint holds (training adds more: schedulers, RNG states, ...).
REQUIRED_KEYS = ("generator", "discriminator", "optimizer_g", "optimizer_d", "epoch", "step", "config")


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Atomically (see srgan.files): a crash or a full disk mid-write leaves
    the previous checkpoint intact."""
    write_file(Path(path), lambda f: torch.save(state, f), overwrite=True)


def resolve_checkpoint_path(path: str | Path) -> Path:
    """A checkpoint file, or a run folder (its checkpoints/last.pt)."""
    path = Path(path).expanduser()
    if path.is_dir():
        for candidate in (path / "checkpoints" / "last.pt", path / "last.pt"):
            if candidate.is_file():
                return candidate
        raise SrganError(f"{path}: a folder with no checkpoints/last.pt (expected a run folder or a .pt file)")
    if not path.is_file():
        raise not_found(path, "checkpoint file or run folder")  # or what it is: a FIFO, a device
    return path


def load_checkpoint(path: str | Path, for_resume: bool = True) -> dict[str, Any]:
    """Read and check a checkpoint written by `save_checkpoint`: everything
    a resume needs (`for_resume`), or the generator and its config only."""
    path = resolve_checkpoint_path(path)
    state = read_torch_file(path)
    if not is_srgan_checkpoint(state):
        raise SrganError(f"{path}: not an srgan checkpoint (expected the keys {', '.join(REQUIRED_KEYS)})")
    check_checkpoint(state, str(path), for_resume)
    return state


def load_generator(path: str | Path) -> SRGenerator:
    """The generator of any file srgan reads (see read_generator_file), or,
    failing those, of any other architecture spandrel recognises (for
    inference only)."""
    return load_described_generator(path)[0]


def load_described_generator(path: str | Path) -> tuple[SRGenerator, str]:
    """load_generator's network, and what was recognised, for the first line
    of a command's output: "RRDBNet (BasicSR/Real-ESRGAN layout), x4, 23
    blocks, 64 channels, growth 32 from RealESRGAN_x4plus.pth"."""
    path = resolve_checkpoint_path(path)
    state, metadata = read_weight_file(path)
    try:
        found = generator_file(state, metadata, path)
    except NotAnSrganGenerator as why:
        weights = unwrap_state_dict(state)
        if weights is None:
            raise
        check_finite(weights, str(path))
        foreign = spandrel_generator(weights, str(path), str(why))
        return foreign, f"{foreign.describe()} from {path}"
    generator = build_generator(found.model)
    generator.load_state_dict(found.weights)
    return generator, f"{found.description} from {path}"


@dataclass
class GeneratorFile:
    """A generator's weights as a file gives them, checked against the
    network its settings describe."""

    model: ModelConfig  # the file's settings (the others at their defaults)
    keys: tuple[str, ...]  # the model.* keys the file fixes
    weights: dict[str, torch.Tensor]  # srgan's names
    description: str  # "RRDBNet (BasicSR/Real-ESRGAN layout), x4, 23 blocks, 64 channels, growth 32"


def read_generator_file(path: str | Path) -> GeneratorFile:
    """The generator of an srgan checkpoint (file or run folder; its EMA
    weights when the run kept them), an srgan .safetensors (its `srgan_model`
    metadata), or a community state dict of an architecture srgan trains
    (models/community.py), in a .pth/.pt or a .safetensors file."""
    path = resolve_checkpoint_path(path)
    return generator_file(*read_weight_file(path), path)


def read_weight_file(path: Path) -> tuple[Any, dict[str, str]]:
    """What the file holds, and its safetensors metadata ({} for a torch
    file), read without running code."""
    if looks_like_safetensors(path):
        return read_safetensors_file(path, "weights file")
    return read_torch_file(path, "checkpoint", expected="a PyTorch file (.pth, .pt) or a .safetensors file"), {}


def generator_file(state: Any, metadata: dict[str, str], path: Path) -> GeneratorFile:
    if "srgan_model" in metadata:
        return srgan_safetensors(state, metadata["srgan_model"], path)
    if is_srgan_checkpoint(state):
        check_checkpoint(state, str(path), for_resume=False)
        model = checkpoint_config(state).model
        layout = f"{model.arch} (srgan checkpoint, step {state.get('step')})"
        weights = state.get("generator_ema") or state["generator"]
        return GeneratorFile(model, srgan_model_keys(model), weights, describe(layout, dataclasses.asdict(model)))
    weights = unwrap_state_dict(state)
    if weights is None:
        raise NotAnSrganGenerator(
            f"{path}: neither an srgan checkpoint nor a state dict (names -> tensors) of a generator"
        )
    check_tensors(weights, str(path))  # before a recogniser reads a shape
    found = recognise(weights, str(path))
    model = config_from_dict({"model": found.model}, f"{path}: a {found.layout}").model
    with torch.device("meta"):  # shapes only: nothing is allocated
        network = build_generator(model)
    try:
        check_state_dict(found.weights, network, f"{path}: {found.layout}")
    except SrganError as error:
        raise NotAnSrganGenerator(str(error)) from None
    return GeneratorFile(model, tuple(found.model), found.weights, describe(found.layout, found.model))


def srgan_safetensors(weights: dict[str, torch.Tensor], settings: str, path: Path) -> GeneratorFile:
    """A generator that `srgan export` wrote: its model section, as JSON in
    the metadata, builds the network; the tensors must fit it exactly."""
    try:
        model_section = parse_json(settings)
    except ValueError as error:
        raise SrganError(f"{path}: srgan_model metadata: not JSON ({first_line(error)})") from None
    if not isinstance(model_section, dict):
        raise SrganError(f"{path}: srgan_model metadata: expected a mapping of model settings")
    model_section = {**model_section, "init_from": None}  # where that run started does not matter here
    model = config_from_dict({"model": model_section}, f"{path}: srgan_model").model
    with torch.device("meta"):
        network = build_generator(model)
    check_state_dict(weights, network, f"{path}: generator")
    layout = f"{model.arch} (srgan safetensors)"
    return GeneratorFile(model, srgan_model_keys(model), weights, describe(layout, dataclasses.asdict(model)))


def read_discriminator_file(path: str | Path) -> Recognised:
    """The discriminator of an srgan checkpoint (file or run folder) or of a
    community state dict (models/community.py), with the settings it implies:
    discriminator, d_channels (and crop_size for vgg)."""
    path = resolve_checkpoint_path(path)
    state, _ = read_weight_file(path)
    if is_srgan_checkpoint(state):
        check_checkpoint(state, str(path), for_resume=False)
        config = checkpoint_config(state)
        settings: dict[str, Any] = {"discriminator": config.gan.discriminator, "d_channels": config.model.d_channels}
        if config.gan.discriminator == "vgg":
            settings["crop_size"] = config.data.crop_size
        weights = unwrap_state_dict(state["discriminator"])
        if weights is None:
            raise SrganError(f"{path}: discriminator: expected a state dict (names -> tensors)")
        check_tensors(weights, f"{path}: discriminator")
        layout = f"{config.gan.discriminator} discriminator (srgan checkpoint, step {state.get('step')})"
        return Recognised(layout, settings, weights)
    weights = unwrap_state_dict(state)
    if weights is None:
        raise SrganError(f"{path}: neither an srgan checkpoint nor a state dict (names -> tensors) of a discriminator")
    check_tensors(weights, str(path))  # before the recogniser reads a shape
    return recognise_discriminator(weights, str(path))


def srgan_model_keys(model: ModelConfig) -> tuple[str, ...]:
    """The model.* keys that shape an srgan generator of model.arch."""
    shape = ("arch", "scale", "blocks", "channels", "growth", "norm", "residual", "res_scale")
    return tuple(key for key in shape if model.arch in ARCH_KEYS.get(key, (model.arch,)))


def is_srgan_checkpoint(state: Any) -> bool:
    return isinstance(state, dict) and "generator" in state and "config" in state


def generator_from_checkpoint(state: dict[str, Any]) -> SRGenerator:
    """The generator of a checked checkpoint (its config's arch), with its
    weights (the EMA weights when the run kept them)."""
    generator = build_generator(checkpoint_config(state).model)
    generator.load_state_dict(state.get("generator_ema") or state["generator"])
    return generator


# ---- the checks -------------------------------------------------------------


def check_checkpoint(state: dict[str, Any], origin: str, for_resume: bool) -> None:
    """Raise SrganError naming the first thing wrong with `state`."""
    config = state.get("config")
    if not isinstance(config, dict):
        raise SrganError(f"{origin}: config: expected a mapping, got {type(config).__name__}")
    run_config = config_from_dict(config, f"{origin}: config")  # types and size limits, before building
    with torch.device("meta"):  # shapes only: nothing is allocated
        generator = build_generator(run_config.model)
    check_state_dict(state["generator"], generator, f"{origin}: generator")
    if state.get("generator_ema") is not None:
        check_state_dict(state["generator_ema"], generator, f"{origin}: generator_ema")
    if for_resume:
        missing = [key for key in REQUIRED_KEYS if key not in state]
        if missing:
            raise SrganError(f"{origin}: lacks {', '.join(missing)}, which resuming needs")
        with torch.device("meta"):
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
                k in METRIC_NAMES and isinstance(v, (int, float)) for k, v in last.items() if k not in ("step", "best")
            )
        ):
            raise SrganError(f"{origin}: last_validation: expected step, best and the metrics' numbers")
        check_metric_state(state.get("metrics", {}), f"{origin}: metrics")
        if "rng" in state:
            check_rng_state(state["rng"], f"{origin}: rng")


def check_state_dict(weights: Any, module: torch.nn.Module, origin: str) -> None:
    """`weights` must be a state dict of exactly `module`'s keys and shapes,
    with finite values."""
    if not isinstance(weights, dict) or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise SrganError(f"{origin}: expected a state dict (names -> tensors)")
    check_tensors(weights, origin)
    expected = module.state_dict()
    for name, tensor in expected.items():
        if name not in weights:
            raise SrganError(f"{origin}: lacks {name} (the config's networks need it)")
        if weights[name].shape != tensor.shape:
            raise SrganError(
                f"{origin}: {name} has shape {list(weights[name].shape)}, the config's networks "
                f"need {list(tensor.shape)}"
            )
        if weights[name].dtype.is_floating_point != tensor.dtype.is_floating_point:
            raise SrganError(f"{origin}: {name} is {weights[name].dtype}, expected {tensor.dtype}")
    unexpected = [name for name in weights if name not in expected]
    if unexpected:
        raise SrganError(f"{origin}: unexpected {unexpected[0]} (not a weight of the config's networks)")
    check_finite(weights, origin)


# The dtypes a weight may be stored in. Integers and bools are read too (BatchNorm's
# num_batches_tracked, an attention layer's position index), where the network
# has them: a float weight stored as one is refused against the network.
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensors(weights: dict[str, torch.Tensor], origin: str) -> None:
    """What can be said of a state dict's tensors before anything computes on
    them, from their metadata alone: a dtype a weight may have (no float8,
    complex or quantized), each element stored once (an expanded, stride-0
    view of a few stored numbers is refused: a 1.6 KB file can declare 2^40
    of them), and no more elements in all than srgan's limit on a network."""
    total = 0
    for name, tensor in weights.items():
        dtype = tensor.dtype
        if (
            tensor.layout != torch.strided
            or tensor.is_quantized
            or dtype.is_complex
            or (dtype.is_floating_point and dtype not in WEIGHT_DTYPES)
        ):
            kind = dtype if tensor.layout == torch.strided else tensor.layout
            raise SrganError(
                f"{origin}: {name} is {kind}; srgan reads weights stored as float16, bfloat16, float32 or "
                "float64 (and integers where the network has them)"
            )
        total += tensor.numel()  # from the shape: nothing is computed
        if total > MAX_GENERATOR_PARAMETERS:
            raise SrganError(
                f"{origin}: more than {MAX_GENERATOR_PARAMETERS:,} numbers (at {name}, of shape "
                f"{list(tensor.shape)}), srgan's limit on a network's weights"
            )
        if overlaps(tensor):
            raise SrganError(
                f"{origin}: {name} of shape {list(tensor.shape)} repeats its stored numbers (strides "
                f"{list(tensor.stride())}: an expanded view, not weights)"
            )


def overlaps(tensor: torch.Tensor) -> bool:
    """Whether two of the tensor's elements share a stored number: along the
    dims in increasing stride, each stride must step past all the elements the
    smaller ones reach (a sufficient test; every tensor torch makes passes it)."""
    reach = 0
    for stride, size in sorted((s, n) for s, n in zip(tensor.stride(), tensor.shape, strict=True) if n > 1):
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


def check_finite(weights: dict[str, torch.Tensor], origin: str) -> None:
    """check_tensors, then every floating tensor finite."""
    check_tensors(weights, origin)
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise SrganError(
                f"{origin}: {name} holds NaN or infinite values (the run diverged before this "
                "checkpoint?); it would produce garbage"
            )


def check_adam_state(state: Any, module: torch.nn.Module, origin: str) -> None:
    """An Adam state_dict for `module`'s parameters, in their order."""
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
    """Each generator state must load into a scratch generator of its kind."""
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


def as_tuples(value):
    """random.setstate wants the tuples that a round trip may have turned into lists."""
    return tuple(as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def check_metric_state(metrics: Any, origin: str) -> None:
    """The epoch's running sums of the logged values (see training/logs.py)."""
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


def checkpoint_config(state: dict[str, Any]) -> Config:
    """The config of a checkpoint that load_checkpoint has checked, typed."""
    return config_from_dict(state["config"], "checkpoint")
