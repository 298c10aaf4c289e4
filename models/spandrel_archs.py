"""The SR architectures spandrel ships, trained by srgan: spandrel's own
classes (as traiNNer-redux builds them), so that what srgan trains is what
every spandrel-based tool reads back.

One table, SPANDREL_ARCHS: model.arch -> the class, the name its
constructor gives the scale, the options srgan fixes (three channels in and
out) and srgan's defaults where the class's own would not build an SR network
(SwinIR's upsampler "" is its denoiser). model.options holds the rest of the
constructor's options; resolve_options checks them against the constructor's
signature and fills in its defaults, so a run's config.yaml names every one.

Importing this module imports spandrel, which imports all its architectures:
build.py imports it only for a config that names one of them."""

from __future__ import annotations

import contextlib
import inspect
import types
import typing
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import spandrel
import torch
from spandrel.architectures.ATD import ATD
from spandrel.architectures.CRAFT import CRAFT
from spandrel.architectures.DAT import DAT
from spandrel.architectures.DCTLSA import DCTLSA
from spandrel.architectures.DITN import DITN
from spandrel.architectures.DRCT import DRCT
from spandrel.architectures.FDAT import FDAT
from spandrel.architectures.HAT import HAT
from spandrel.architectures.MoESR import MoESR
from spandrel.architectures.MoSR import MoSR
from spandrel.architectures.OmniSR import OmniSR
from spandrel.architectures.PLKSR import PLKSR, RealPLKSR
from spandrel.architectures.RCAN import RCAN
from spandrel.architectures.RGT import RGT
from spandrel.architectures.SAFMN import SAFMN
from spandrel.architectures.SeemoRe import SeemoRe
from spandrel.architectures.SPAN import SPAN
from spandrel.architectures.Swin2SR import Swin2SR
from spandrel.architectures.SwinIR import SwinIR
from torch import nn

from srgan.configs.checks import MAX_GENERATOR_PARAMETERS
from srgan.configs.schema import OWN_ARCHS, ModelConfig
from srgan.files.errors import SrganError, first_line
from srgan.models.large_kernel import swap_large_kernels
from srgan.models.spandrel_generator import BuildBudget, OverBudget, SpandrelGenerator


@dataclass(frozen=True)
class SpandrelArch:
    network: type[nn.Module]
    scale_option: str  # what the constructor calls the scale
    fixed: dict[str, Any] = field(default_factory=dict)  # set by srgan: RGB in, RGB out
    defaults: dict[str, Any] = field(default_factory=dict)  # srgan's, over the constructor's
    scales: tuple[int, ...] = (1, 2, 3, 4, 8)  # those its upsampler builds
    # Submodules whose weights the class computes from others for inference
    # (SPAN's eval_conv, the fused form of its training branches): not trained.
    derived: tuple[str, ...] = ()
    # The smallest micro-batch its training forward runs: DAT's channel
    # attention has a BatchNorm over 1x1 pooled features, which one sample cannot normalise.
    min_batch: int = 1


# The transformers whose `upsampler` defaults to "" (no upsampling: their
# denoising form) get pixelshuffle, the papers' classical-SR setting.
SPANDREL_ARCHS: dict[str, SpandrelArch] = {
    "atd": SpandrelArch(ATD, "upscale", {"in_chans": 3}, {"upsampler": "pixelshuffle"}),
    "craft": SpandrelArch(CRAFT, "upscale", {"in_chans": 3}, scales=(2, 3, 4)),
    "dat": SpandrelArch(DAT, "upscale", {"in_chans": 3}, min_batch=2),
    "dctlsa": SpandrelArch(DCTLSA, "upscale", {"in_nc": 3, "out_nc": 3}),
    "ditn": SpandrelArch(DITN, "upscale", {"inp_channels": 3}),
    "drct": SpandrelArch(DRCT, "upscale", {"in_chans": 3}, {"upsampler": "pixelshuffle"}),
    "fdat": SpandrelArch(FDAT, "scale", {"num_in_ch": 3, "num_out_ch": 3}),
    # HAT's window of 7 does not tile its img_size of 64; its paper's models use 16
    "hat": SpandrelArch(HAT, "upscale", {"in_chans": 3}, {"window_size": 16}),
    "moesr": SpandrelArch(MoESR, "scale", {"in_ch": 3, "out_ch": 3}),
    "mosr": SpandrelArch(MoSR, "upscale", {"in_ch": 3, "out_ch": 3}),
    "omnisr": SpandrelArch(OmniSR, "up_scale", {"num_in_ch": 3, "num_out_ch": 3}),
    "plksr": SpandrelArch(PLKSR, "upscaling_factor"),
    "rcan": SpandrelArch(RCAN, "scale", {"n_colors": 3}),
    "realplksr": SpandrelArch(RealPLKSR, "upscaling_factor"),
    "rgt": SpandrelArch(RGT, "upscale", {"in_chans": 3}),
    # SAFMN's constructor has no default width: 36 is the paper's SAFMN (not -L)
    "safmn": SpandrelArch(SAFMN, "upscaling_factor", defaults={"dim": 36}),
    "seemore": SpandrelArch(SeemoRe, "scale", {"in_chans": 3}),
    "span": SpandrelArch(SPAN, "upscale", {"num_in_ch": 3, "num_out_ch": 3}, derived=("eval_conv",)),
    # SwinIR's and Swin2SR's window of 7 does not tile their img_size of 64; their released SR models use 8
    "swin2sr": SpandrelArch(Swin2SR, "upscale", {"in_chans": 3}, {"upsampler": "pixelshuffle", "window_size": 8}),
    "swinir": SpandrelArch(SwinIR, "upscale", {"in_chans": 3}, {"upsampler": "pixelshuffle", "window_size": 8}),
}

# spandrel's architectures that restore at one scale or need more than one
# image (faces, inpainting, denoising, dehazing, low light): not SR networks.
NOT_SR = (
    "codeformer dncnn drunet fbcnn fftformer gfpgan hvicidnet kbnet lama mixdehazenet "
    "mmrealsr nafnet restoreformer retinexformer scunet uformer".split()
)


def arch_names() -> list[str]:
    """srgan's own architectures, then spandrel's that it trains."""
    return [*OWN_ARCHS, *SPANDREL_ARCHS]


def settable_options(arch: SpandrelArch) -> dict[str, inspect.Parameter]:
    """The constructor's options a YAML value can set: not the scale, not
    srgan's fixed ones, not those whose default is a class or a function
    (a norm layer, an activation)."""
    parameters = inspect.signature(arch.network.__init__).parameters
    return {
        name: p
        for name, p in parameters.items()
        if name != "self"
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and name != arch.scale_option
        and name not in arch.fixed
        and (p.default is p.empty or is_plain(p.default))
    }


def is_plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (list, tuple)) and all(is_plain(v) for v in value)


def option_hints(arch: SpandrelArch) -> dict[str, Any]:
    try:
        return typing.get_type_hints(arch.network.__init__)
    except Exception:  # annotations naming what the module does not import: read the defaults instead
        return {}


def resolve_options(model: ModelConfig) -> ModelConfig:
    """`model` with model.options checked against the architecture's
    constructor and completed with its defaults (srgan's own architectures:
    `model` itself). Raises SrganError, with the key path, for an unknown
    architecture (naming those srgan trains), a scale the network does not
    build, an option the constructor does not take (naming those it does)
    and a value of the wrong type."""
    if model.arch in OWN_ARCHS:
        return model
    arch = spandrel_arch(model.arch)
    if model.scale not in arch.scales:
        raise SrganError(
            f"model.scale: expected {', '.join(map(str, arch.scales))} with model.arch {model.arch}, got {model.scale}"
        )
    settable, hints = settable_options(arch), option_hints(arch)
    for name in model.options:
        if name not in settable:
            why = " (srgan sets it)" if name in arch.fixed or name == arch.scale_option else ""
            raise SrganError(
                f"model.options.{name}: not an option of {arch.network.__name__}{why}; "
                f"its options: {', '.join(settable)}"
            )
    options: dict[str, Any] = {}
    for name, parameter in settable.items():
        if name in model.options:
            value = model.options[name]
        elif name in arch.defaults:
            value = arch.defaults[name]
        elif parameter.default is not parameter.empty:
            value = parameter.default
        else:
            raise SrganError(f"model.options.{name}: {arch.network.__name__} needs it (no default)")
        expected = expected_type(hints.get(name), parameter.default)
        if expected is not None and not fits(value, expected):
            raise SrganError(f"model.options.{name}: expected {describe(expected)}, got {value!r}")
        options[name] = as_yaml(value)
    return replace(model, options=options)


def spandrel_arch(name: str) -> SpandrelArch:
    if name in SPANDREL_ARCHS:
        return SPANDREL_ARCHS[name]
    known = ", ".join(arch_names())
    if name.lower() in SPANDREL_ARCHS:
        raise SrganError(f"model.arch: expected {name.lower()!r} (lower case); srgan trains {known}")
    if name.lower() in NOT_SR:
        raise SrganError(f"model.arch: spandrel's {name} is not a single-image SR network; srgan trains {known}")
    raise SrganError(f"model.arch: expected one of {known} (srgan config archs), got {name!r}")


def expected_type(hint: Any, default: Any) -> Any:
    """The type a value must have: the annotation where the constructor has
    one, else the default's type (a float option takes an integer too)."""
    if hint is not None:
        return hint
    if default is inspect.Parameter.empty or default is None:
        return None
    if isinstance(default, (list, tuple)):
        return list[type(default[0])] if default else list  # type: ignore[misc]
    return type(default)


def fits(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is None:
        return True
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if origin in (list, tuple, Sequence, typing.Sequence) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if not args:
            return True
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):  # a fixed length: one type a place
            return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args, strict=True))
        return all(fits(v, args[0]) for v in value)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # an annotation srgan does not read: the constructor judges


def describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        return f"a list of {describe(args[0])}s" if args else "a list"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else describe(a) for a in args)
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def build_spandrel_generator(model: ModelConfig) -> SpandrelGenerator:
    """spandrel's network for a resolved model section, with fresh weights,
    wrapped as srgan trains and runs it. Raises SrganError for options the
    constructor refuses, and for a network spandrel would read back as
    another architecture or scale, or with another output (an option
    spandrel cannot tell from the weights: a tool loading the file would
    upscale differently)."""
    arch = spandrel_arch(model.arch)
    network = construct(arch, {**arch.fixed, **model.options, arch.scale_option: model.scale})
    check_no_empty_layer(network)
    swap_large_kernels(network)  # the same weights and keys; a faster weight gradient on the CPU
    for name, module in network.named_modules():
        if name.rpartition(".")[2] in arch.derived:
            module.requires_grad_(False)  # no gradient reaches them: DDP would wait for one
    if torch.empty(0).is_meta:  # a shapes-only build (a checkpoint's checks): nothing to read back
        descriptor = shapes_only_descriptor(network, model)
    else:
        descriptor = described(network, read_back_checked(network, arch, model), model.scale)
    return SpandrelGenerator(descriptor, min_batch=arch.min_batch)


def described(network: nn.Module, read_back: Any, scale: int) -> Any:
    """spandrel's descriptor of srgan's network, with what spandrel's
    reading of its weights says of it (size rule, precisions, tags)."""
    return spandrel.ImageModelDescriptor(
        network,
        network.state_dict(),
        architecture=read_back.architecture,
        purpose=read_back.purpose,
        tags=read_back.tags,
        supports_half=read_back.supports_half,
        supports_bfloat16=read_back.supports_bfloat16,
        scale=scale,
        input_channels=3,
        output_channels=3,
        size_requirements=read_back.size_requirements,
        tiling=read_back.tiling,
    )


def construct(arch: SpandrelArch, kwargs: dict[str, Any]) -> nn.Module:
    """The class built with `kwargs`. Raises SrganError for options the
    constructor refuses, and for a network of more numbers than srgan's
    generator limit, counted on the meta device before any memory is spent.
    A constructor that computes with its tensors (DAT's drop-path rates call
    .item()) cannot build there: it builds on the CPU with its tensors
    counted as they are made."""
    name = arch.network.__name__
    on_meta = torch.empty(0).is_meta
    with warnings.catch_warnings():  # the architectures' deprecation notices are not the user's business
        warnings.simplefilter("ignore")
        try:
            try:
                with torch.device("meta"):
                    shapes: nn.Module | None = arch.network(**kwargs)
            except (NotImplementedError, RuntimeError):
                shapes = None
            if shapes is not None:
                count = sum(t.numel() for t in [*shapes.parameters(), *shapes.buffers()])
                if count > MAX_GENERATOR_PARAMETERS:
                    raise OverBudget(f"{count:,} numbers")
                if on_meta:
                    return shapes
            with torch.device("cpu") if on_meta else contextlib.nullcontext(), BuildBudget(MAX_GENERATOR_PARAMETERS):
                return arch.network(**kwargs)
        except OverBudget as error:
            raise SrganError(
                f"model.options: {name} would hold more than srgan's limit of {MAX_GENERATOR_PARAMETERS:,} "
                f"weights ({error})"
            ) from None
        except Exception as error:  # the constructor refuses a combination of options
            raise SrganError(f"model.options: {name} refuses them ({first_line(error)})") from None


def check_no_empty_layer(network: nn.Module) -> None:
    """Refuse options that leave a layer with no features: DAT's and RGT's
    position bias is a sixteenth of a branch's width, none at embed_dim 16. torch
    runs such a layer (it computes nothing), onnxruntime refuses it, and no
    published file has one."""
    for name, module in network.named_modules():
        if isinstance(module, nn.LayerNorm):
            widths: tuple[int, ...] = tuple(module.normalized_shape)
        elif isinstance(module, nn.Linear):
            widths = (module.in_features, module.out_features)
        elif isinstance(module, nn.Conv2d):
            widths = (module.in_channels, module.out_channels)
        else:
            continue
        if 0 in widths:
            raise SrganError(
                f"model.options: {type(network).__name__}'s {name} would have no features with them ({module}); "
                "give it more width (embed_dim, dim) or fewer heads"
            )


def read_back_checked(network: nn.Module, arch: SpandrelArch, model: ModelConfig) -> Any:
    """spandrel's reading of the network's weights (its descriptor), checked
    to be the same class, scale and output."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            read_back = spandrel.ModelLoader().load_from_state_dict(dict(network.state_dict()))
        except Exception as error:  # spandrel's reading of such weights fails: no tool would load the file
            raise SrganError(
                f"model.options: spandrel cannot read a {type(network).__name__} of these options back "
                f"({first_line(error)})"
            ) from None
    if not isinstance(read_back, spandrel.ImageModelDescriptor):
        raise SrganError(f"model.arch: spandrel reads a {model.arch} network as a {read_back.architecture.name}")
    if type(read_back.model) is not arch.network or read_back.scale != model.scale:
        raise SrganError(
            f"model.options: spandrel would read these weights as {type(read_back.model).__name__} "
            f"x{read_back.scale}, not {model.arch} x{model.scale}"
        )
    check_same_output(network, read_back, model)
    return read_back


def shapes_only_descriptor(network: nn.Module, model: ModelConfig) -> Any:
    """A descriptor of a network on the meta device, for checks of a file's
    shapes: spandrel's architecture entry for the class, nothing measured."""
    package = type(network).__module__.split(".__arch")[0]
    (architecture,) = [e.architecture for e in spandrel.MAIN_REGISTRY if type(e.architecture).__module__ == package]
    return spandrel.ImageModelDescriptor(
        network,
        network.state_dict(),  # the descriptor loads it: meta into meta, nothing copied
        architecture=architecture,
        purpose="SR" if model.scale > 1 else "Restoration",
        tags=[],
        supports_half=False,
        supports_bfloat16=False,
        scale=model.scale,
        input_channels=3,
        output_channels=3,
    )


def check_same_output(network: nn.Module, read_back: Any, model: ModelConfig) -> None:
    """The network and spandrel's reading of its weights agree on one small
    input: every option spandrel cannot tell from a file (SPAN's img_range,
    a window size that changes no weight's shape) is left at what spandrel
    assumes."""
    need = read_back.size_requirements
    side = max(need.minimum, need.multiple_of * -(-8 // need.multiple_of))
    x = torch.rand(1, 3, side, side, generator=torch.Generator().manual_seed(0))
    was_training = network.training
    network.eval()
    try:
        with torch.no_grad():
            ours = network(x.clone())  # a clone each: some (RCAN) write into their input
            theirs = read_back.model.eval()(x.clone())
    except Exception as error:  # options the constructor took but the forward cannot run with (0 channels)
        raise SrganError(
            f"model.options: {type(network).__name__} cannot run with them ({first_line(error)})"
        ) from None
    finally:
        network.train(was_training)
    if ours.shape != theirs.shape or not torch.allclose(ours, theirs, atol=1e-5, rtol=0):
        raise SrganError(
            f"model.options: spandrel cannot tell some of them from the weights ({model.arch} reads back with "
            "its defaults and another output): a file of this network would upscale differently in other tools; "
            "leave those options at their defaults"
        )


def file_settings(network: nn.Module, scale: int) -> dict[str, Any] | None:
    """The model section (arch, scale, options) of a network spandrel read
    from a community file at `scale`, its options the constructor arguments
    spandrel's class records (its `hyperparameters`), less those srgan sets
    and those a YAML value cannot hold. Returns None for a class srgan does
    not train."""
    names = [name for name, arch in SPANDREL_ARCHS.items() if type(network) is arch.network]
    if not names:
        return None
    name, arch = names[0], SPANDREL_ARCHS[names[0]]
    recorded = getattr(network, "hyperparameters", {})
    settable, hints = settable_options(arch), option_hints(arch)
    options = {
        key: as_yaml(whole_if_int(recorded[key], expected_type(hints.get(key), parameter.default)))
        for key, parameter in settable.items()
        if key in recorded
    }
    return {"arch": name, "scale": scale, "options": options}


def whole_if_int(value: Any, expected: Any) -> Any:
    """An option the constructor takes as an int that spandrel computed as a
    float from a tensor's shape (DITN's ffn_expansion_factor: 2.0): the int."""
    if expected is int and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def as_yaml(value: Any) -> Any:
    """A recorded argument as the config writes it: tuples as lists."""
    if isinstance(value, (list, tuple)):
        return [as_yaml(v) for v in value]
    return value
