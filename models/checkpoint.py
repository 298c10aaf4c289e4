"""Generator weight files: srgan checkpoints (a dict of tensors and plain
values, written atomically), srgan .safetensors and community state dicts,
read with `weights_only=True` (no pickled code runs on load) and checked
once, here, so that the rest of the program can trust the generator they
hold. training/state.py checks what else a checkpoint holds for a resume
(the discriminator, the optimizers, the RNG and the logs' state).

A checkpoint is a file anyone may hand us, so this module checks its config's
sizes against the config limits before it builds a network, its tensors
against the shapes that config implies (on the meta device: nothing is
allocated), and its numbers for finiteness. check_tensors first checks every
state dict from its tensors' metadata alone (a foreign one before a
recogniser reads a shape from it): dtypes, repeated (stride-0) storage, and
the count of numbers. The SrganError names the file, the key and the first
problem found."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from srgan.configs import Config, config_from_dict
from srgan.configs.checks import MAX_GENERATOR_PARAMETERS
from srgan.configs.schema import ModelConfig, arch_has_key
from srgan.files import looks_like_safetensors, parse_json, read_safetensors_file, read_torch_file, write_file
from srgan.files.errors import SrganError, first_line
from srgan.files.reading import not_found
from srgan.models.build import ARCHITECTURE_KEYS, DISCRIMINATOR_KEYS, SRGenerator, build_generator
from srgan.models.community import (
    NotAnSrganGenerator,
    Recognised,
    describe,
    recognise,
    recognise_discriminator,
    unwrap_state_dict,
)
from srgan.models.spandrel_generator import spandrel_generator


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write `state` to `path` atomically (srgan.files.write_file): a crash or
    a full disk mid-write leaves the previous checkpoint intact. Raises
    SrganError for a target it refuses, DiskFull when the disk fills up."""
    write_file(Path(path), lambda f: torch.save(state, f), overwrite=True)


def resolve_checkpoint_path(path: str | Path) -> Path:
    """The checkpoint file `path` names: the file itself, or a run folder's
    checkpoints/last.pt (or last.pt). Raises SrganError for a folder without
    one, and for a path that is missing or no regular file."""
    path = Path(path).expanduser()
    if path.is_dir():
        for candidate in (path / "checkpoints" / "last.pt", path / "last.pt"):
            if candidate.is_file():
                return candidate
        raise SrganError(f"{path}: a folder with no checkpoints/last.pt (expected a run folder or a .pt file)")
    if not path.is_file():
        raise not_found(path, "checkpoint file or run folder")  # says what is there instead: a FIFO, a device
    return path


def load_generator(path: str | Path) -> SRGenerator:
    """The generator of any file srgan reads (see read_generator_file), or,
    failing those, of any other architecture spandrel recognises (for
    inference only). Raises SrganError naming the file when neither can run
    it."""
    return load_described_generator(path)[0]


def load_described_generator(path: str | Path) -> tuple[SRGenerator, str]:
    """load_generator's network, and a description of what the file holds
    for the first line of a command's output: "RRDBNet (BasicSR/Real-ESRGAN
    layout), x4, 23 blocks, 64 channels, growth 32 from RealESRGAN_x4plus.pth".
    Raises SrganError as load_generator does."""
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
    (models/community.py, or spandrel's: spandrel_file), in a .pth/.pt or a
    .safetensors file. Raises NotAnSrganGenerator when no architecture srgan
    trains fits the weights, and
    SrganError naming the file and key for any other problem."""
    path = resolve_checkpoint_path(path)
    state, metadata = read_weight_file(path)
    try:
        return generator_file(state, metadata, path)
    except NotAnSrganGenerator as why:
        weights = unwrap_state_dict(state)
        if weights is None or "srgan_model" in metadata or is_srgan_checkpoint(state):
            raise
        return spandrel_file(weights, path, why)


def spandrel_file(weights: dict[str, torch.Tensor], path: Path, why: NotAnSrganGenerator) -> GeneratorFile:
    """A community file of one of spandrel's architectures srgan trains
    (models/spandrel_archs.py): spandrel recognises it (within the build
    budget of models/spandrel_generator.py), the options its class records
    are the file's model section, and the weights take SpandrelGenerator's
    names. Raises `why` when spandrel is not installed, SrganError when
    spandrel does not recognise the file, and NotAnSrganGenerator for an
    architecture srgan runs but does not train."""
    try:
        import spandrel  # noqa: F401
    except ImportError:
        raise why from None
    from srgan.models.spandrel_archs import file_settings  # spandrel's architectures: seconds, only here

    check_finite(weights, str(path))
    foreign = spandrel_generator(weights, str(path), str(why))
    settings = file_settings(foreign.network, foreign.scale)
    if settings is None:
        raise NotAnSrganGenerator(
            f"{why}; spandrel reads it as {foreign.describe()}, an architecture srgan runs but does not train "
            "(srgan config archs lists those it trains)"
        )
    layout = f"{foreign.descriptor.architecture.name} (spandrel)"
    model = config_from_dict({"model": settings}, f"{path}: a {layout}").model
    with torch.device("meta"):  # shapes only: srgan's build of the file's settings must hold its tensors
        network = build_generator(model)
    renamed = {f"network.{name}": tensor for name, tensor in foreign.network.state_dict().items()}
    check_state_dict(renamed, network, f"{path}: {layout}")
    return GeneratorFile(model, tuple(settings), renamed, describe(layout, settings))


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
        check_generator_state(state, str(path))
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
    discriminator, d_channels (and crop_size for vgg, patchgan_layers for
    patchgan). Raises SrganError
    naming the file when it holds no discriminator srgan knows, or a damaged
    one."""
    path = resolve_checkpoint_path(path)
    state, _ = read_weight_file(path)
    if is_srgan_checkpoint(state):
        check_generator_state(state, str(path))
        config = checkpoint_config(state)
        settings: dict[str, Any] = {"discriminator": config.gan.discriminator, "d_channels": config.model.d_channels}
        if config.gan.discriminator == "vgg":
            settings["crop_size"] = config.data.crop_size
        if config.gan.discriminator == "patchgan":
            settings["patchgan_layers"] = config.gan.patchgan_layers
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
    return tuple(key for key in ARCHITECTURE_KEYS if key not in DISCRIMINATOR_KEYS and arch_has_key(model.arch, key))


def is_srgan_checkpoint(state: Any) -> bool:
    return isinstance(state, dict) and "generator" in state and "config" in state


def generator_from_checkpoint(state: dict[str, Any]) -> SRGenerator:
    """The generator of a checked checkpoint (its config's arch), with its
    weights (the EMA weights when the run kept them)."""
    generator = build_generator(checkpoint_config(state).model)
    generator.load_state_dict(state.get("generator_ema") or state["generator"])
    return generator


# ---- the checks -------------------------------------------------------------


def check_generator_state(state: dict[str, Any], origin: str) -> tuple[Config, torch.nn.Module]:
    """Check what every user of an srgan checkpoint reads: its config (types
    and size limits, before anything is built) and the generator's weights
    (and its EMA's) against the network that config describes. Returns the
    typed config and that generator on the meta device (shapes only, for
    checks of what else the file holds); raises SrganError naming the first
    thing wrong."""
    config = state.get("config")
    if not isinstance(config, dict):
        raise SrganError(f"{origin}: config: expected a mapping, got {type(config).__name__}")
    run_config = config_from_dict(config, f"{origin}: config")  # types and size limits, before building
    with torch.device("meta"):  # shapes only: nothing is allocated
        generator = build_generator(run_config.model)
    check_state_dict(state["generator"], generator, f"{origin}: generator")
    if state.get("generator_ema") is not None:
        check_state_dict(state["generator_ema"], generator, f"{origin}: generator_ema")
    return run_config, generator


def check_state_dict(weights: Any, module: torch.nn.Module, origin: str) -> None:
    """Check that `weights` is a state dict of exactly `module`'s keys and
    shapes, with finite values; raises SrganError naming the first key that
    is missing, unexpected, of another shape or dtype kind, or not finite."""
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


# The dtypes a weight may be stored in. check_tensors also reads integers and bools
# (BatchNorm's num_batches_tracked, an attention layer's position index), and
# check_state_dict refuses one where the network has a float weight.
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensors(weights: dict[str, torch.Tensor], origin: str) -> None:
    """Check what a state dict's tensors' metadata alone can tell, before
    anything computes on them: a dtype a weight may have (no float8, complex
    or quantized), each element stored once (it refuses an expanded, stride-0
    view of a few stored numbers, since a tiny file can declare trillions of
    them), and no more elements in all than srgan's limit on a network.
    Raises SrganError naming the file and the first tensor that fails."""
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
    """Run check_tensors, then raise SrganError naming the first floating
    tensor that holds NaN or infinite values."""
    check_tensors(weights, origin)
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise SrganError(
                f"{origin}: {name} holds NaN or infinite values (the run diverged before this "
                "checkpoint?); it would produce garbage"
            )


def checkpoint_config(state: dict[str, Any]) -> Config:
    """The config of a checkpoint that check_generator_state has checked, typed."""
    return config_from_dict(state["config"], "checkpoint")
