"""YAML -> typed `Config`: presets by name or files by path, `--set`
overrides, and every check a user's input needs, done once, here.

Each error names the dotted key (and the file) and what was expected."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from srgan.configs.schema import ARCH_KEYS, ARCH_SCALES, BUILTIN_SAMPLES, Config, PerceptualConfig
from srgan.files.errors import SrganError
from srgan.files.reading import read_regular_bytes

DEFAULT_PRESET = "demo"

# The layers of torchvision's VGG `features`: conv layers per block.
VGG_BLOCKS = {"vgg16": (2, 2, 3, 3, 3), "vgg19": (2, 2, 4, 4, 4)}

# Upper bounds on what a config may ask for, checked before anything is
# allocated, whether the config comes from the user or from a checkpoint: far
# above any published SRResNet/SRGAN (16 blocks, 64 channels), far below
# what would exhaust memory while building the networks.
LIMITS = {
    "model.blocks": 128,
    "model.channels": 512,
    "model.growth": 512,
    "model.d_channels": 256,
    "data.crop_size": 2048,
    "data.batch_size": 4096,
    "data.workers": 256,
    "data.repeat": 1_000_000,
}
# An RRDBNet's size grows with blocks x (channels + growth)^2: the limits
# above allow one of billions of weights, so its count is bounded too, by
# the largest SRResNet they allow (128 blocks x 512 channels).
MAX_GENERATOR_PARAMETERS = 610_000_000
MAX_CONFIG_BYTES = 1 << 20  # a YAML config is a page of text
MAX_SEED = 2**32 - 1  # NumPy's legacy seed is 32-bit
USM_REACH = 25  # the unsharp mask's 51 x 51 blur (losses/sharpen.py): pixels read each side
MAX_KERNEL_SIZE = 41  # a degradation blur kernel's side (Real-ESRGAN's largest: 21)


def preset_names() -> list[str]:
    folder = resources.files("srgan.configs")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def resume_config(run_dir: Path | str) -> Path:
    """The config.yaml of a run folder given to --resume; refuses a folder
    that holds none (not a run folder)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise SrganError(f"--resume: {run_dir}: not a run folder (no config.yaml)")
    return path


def load_config(source: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """A preset name or a YAML path (default: the demo preset), then `key.path=value` overrides."""
    source = source or DEFAULT_PRESET
    raw, origin, stem = _read_source(source)
    raw.setdefault("name", stem)
    config = config_from_dict(raw, origin)  # the file's own mistakes name the file
    if overrides:
        for item in overrides:
            _apply_override(raw, item)
        _drop_keys_of_another_arch(raw, overrides)
        _drop_degradation_settings_if_bicubic(raw, overrides)
        config = config_from_dict(raw, "--set")
    config.given_keys = frozenset(_dotted_keys(raw))
    return config


def _dotted_keys(raw: dict, prefix: str = "") -> list[str]:
    """model.blocks, train.lr_schedule.gamma, ...: every key a document gives
    (a mapping-valued setting, loss.perceptual.layers, counts as one)."""
    keys = []
    for key, value in raw.items():
        if isinstance(value, dict) and prefix + str(key) not in ("loss.perceptual.layers",):
            keys += _dotted_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def _drop_keys_of_another_arch(raw: dict, overrides: list[str] | tuple[str, ...]) -> None:
    """`--set model.arch=rrdb` on a preset written for srresnet: the preset's
    srresnet-only keys (model.norm, ...) became moot, not mistakes of the
    user's, and are dropped. A key that --set names itself is kept, and
    refused if it does not apply."""
    named = {item.partition("=")[0].strip() for item in overrides}
    model = raw.get("model")
    if "model.arch" not in named or not isinstance(model, dict):
        return
    for key, archs in ARCH_KEYS.items():
        if key in model and model.get("arch") not in archs and f"model.{key}" not in named:
            del model[key]


def _drop_degradation_settings_if_bicubic(raw: dict, overrides: list[str] | tuple[str, ...]) -> None:
    """`--set data.degradation=bicubic` on a realesrgan preset: the preset's
    data.realesrgan became moot and is dropped, as another arch's model keys
    are; a data.realesrgan key that --set names itself is kept, and refused."""
    named = {item.partition("=")[0].strip() for item in overrides}
    data = raw.get("data")
    if "data.degradation" not in named or not isinstance(data, dict) or data.get("degradation") == "realesrgan":
        return
    if "realesrgan" in data and not any(key.startswith("data.realesrgan") for key in named):
        del data["realesrgan"]


def config_from_dict(raw: dict, origin: str = "config") -> Config:
    """Type-check a plain dict (from YAML or a checkpoint) into a `Config`."""
    config = _build(Config, raw, "", origin)
    _one_perceptual_layer_setting(config, raw, origin)
    _check_arch_keys(config, raw, origin)
    _check_values(config, origin)
    _check_degradation(config, raw, origin)
    return config


def _check_arch_keys(config: Config, raw: dict, origin: str) -> None:
    """A key the config names must apply to its model.arch. Only the keys
    named count (the dataclass holds every key, with defaults): the
    written configs (config_to_dict) leave out those of other archs, so
    they load again."""
    arch = config.model.arch
    for key in raw.get("model") or {}:
        if key in ARCH_KEYS and arch not in ARCH_KEYS[key]:
            archs = " and ".join(ARCH_KEYS[key])
            raise SrganError(f"{origin}: model.{key}: applies to model.arch {archs} only, not {arch} (leave it out)")


def config_to_dict(config: Config) -> dict:
    """The config as plain values: the keys of its model.arch only (a key of
    another arch would be refused when the dict is loaded again)."""
    values = dataclasses.asdict(config)
    del values["given_keys"]  # how the config was written, not a setting
    for key, archs in ARCH_KEYS.items():
        if config.model.arch not in archs:
            del values["model"][key]
    if config.data.degradation != "realesrgan":
        del values["data"]["realesrgan"]  # refused with bicubic, as another arch's keys are
    return values


def config_to_yaml(config: Config) -> str:
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def vgg_layer_count(network: str, layer: str) -> int | None:
    """How many modules of VGG `features` to keep so that `layer` (conv3_4,
    relu5_4, pool5, ...) is the last; None when the name does not exist."""
    blocks = VGG_BLOCKS[network]
    index = 0
    for b, convs in enumerate(blocks, start=1):
        for i in range(1, convs + 1):
            if layer == f"conv{b}_{i}":
                return index + 1
            if layer == f"relu{b}_{i}":
                return index + 2
            index += 2
        if layer == f"pool{b}":
            return index + 1
        index += 1
    return None


def perceptual_layers(perceptual: PerceptualConfig) -> dict[str, float]:
    """The VGG layers of the perceptual loss and their weights: `layers`, or
    `layer` alone with weight 1."""
    if perceptual.layers is not None:
        return dict(perceptual.layers)
    assert perceptual.layer is not None  # the loader refuses a config with neither
    return {perceptual.layer: 1.0}


def vgg_pool_count(network: str, layer: str) -> int:
    """How many 2x2 max-poolings of VGG `features` come before `layer` (and it, for pool<b>)."""
    count = vgg_layer_count(network, layer) or 0
    kept, pools = 0, 0
    for convs in VGG_BLOCKS[network]:
        kept += 2 * convs + 1
        if kept <= count:
            pools += 1
    return pools


def generator_parameters(arch: str, scale: int, blocks: int, channels: int, growth: int) -> int:
    """The weights an RRDBNet has (counted from its layers, before building
    it); 0 for the other archs, which the key limits keep small enough."""
    if arch != "rrdb":
        return 0
    c, g = channels, growth
    dense = 9 * (c * g + (c + g) * g + (c + 2 * g) * g + (c + 3 * g) * g + (c + 4 * g) * c) + 4 * g + c
    first = 9 * 3 * (4 // scale) ** 2 * c + c
    return first + 3 * blocks * dense + 4 * (9 * c * c + c) + 9 * c * 3 + 3


def _read_source(source: str) -> tuple[dict, str, str]:
    path = Path(source)
    looks_like_path = path.suffix in (".yaml", ".yml") or "/" in source or path.is_file()
    if not looks_like_path:
        names = preset_names()
        if source not in names:
            hint = _closest(source, names)
            raise SrganError(
                f"--config: no preset named {source!r}{hint}; presets are {', '.join(names)}, "
                "or give the path of a YAML file"
            )
        path = Path(str(resources.files("srgan.configs") / f"{source}.yaml"))
    if not path.exists() or path.is_dir():  # a FIFO or a device: read_yaml_file says what it is
        raise SrganError(f"--config: {source}: no such file")
    raw = read_yaml_file(path, "config")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise SrganError(f"{path}: expected a mapping of config sections, got {type(raw).__name__}")
    return raw, str(path), path.stem


def read_yaml_file(path: Path, what: str, unique_keys: bool = False) -> Any:
    """A YAML `what` ("config", "sweep plan") of at most MAX_CONFIG_BYTES that
    anyone may have edited, parsed (see parse_yaml); read by the one bounded
    reader of regular files (a FIFO would wait forever, a device never ends)."""
    data = read_regular_bytes(path, MAX_CONFIG_BYTES, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SrganError(f"{path}: cannot be read ({error.__class__.__name__}: {error})") from None
    return parse_yaml(text, str(path), unique_keys)


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (SafeLoader keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key_node.value!r} given twice", key_node.start_mark
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, origin: str, unique_keys: bool = False) -> Any:
    """yaml.safe_load (refusing a repeated key when asked) with its failures
    as one-line errors naming `origin`."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader) if unique_keys else yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise SrganError(f"{origin}:{where}: {problem}") from None
    except RecursionError:
        raise SrganError(f"{origin}: nested too deeply to be a config") from None


def _apply_override(raw: dict, item: str) -> None:
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SrganError(f"--set {item!r}: expected key.path=value, e.g. --set train.epochs=5")
    try:
        value = parse_yaml(text, f"--set {key}") if text.strip() else None
    except SrganError as error:
        if "nested too deeply" in str(error):
            raise
        value = text  # not a YAML scalar: take it as a plain string
    node = raw
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SrganError(f"--set {key}: {'.'.join(parts[: depth + 1])} is not a section")
        node = child
    section = _section_type(parts)
    if section is None:
        node[parts[-1]] = value
    elif not isinstance(value, dict):
        example = dataclasses.fields(section)[0].name
        raise SrganError(
            f"--set: {key}: expected a mapping, got {_show(value)}; or set its keys one by one, "
            f"e.g. --set {key}.{example}=VALUE"
        )
    else:
        # a section given whole changes the keys it names, not the others
        # (its unknown keys are refused with their dotted path by _build)
        if not isinstance(node.get(parts[-1]), dict):
            node[parts[-1]] = {}
        _merge(node[parts[-1]], value, section)


def _section_type(parts: list[str]) -> type | None:
    """The dataclass of the config section the dotted key names, or None for a value (or an unknown key)."""
    cls: type = Config
    for part in parts:
        hint = typing.get_type_hints(cls).get(part)
        if not dataclasses.is_dataclass(hint):
            return None
        cls = typing.cast(type, hint)
    return cls


def _merge(into: dict, value: dict, section: type) -> None:
    """`value`'s keys into the section's: subsections key by key, any other
    value (a mapping-valued setting such as loss.perceptual.layers too) whole."""
    hints = typing.get_type_hints(section)
    for key, item in value.items():
        hint = hints.get(key)
        if dataclasses.is_dataclass(hint) and isinstance(item, dict) and isinstance(into.get(key), dict):
            _merge(into[key], item, typing.cast(type, hint))
        else:
            into[key] = item


def _closest(name: str, options: typing.Iterable[str]) -> str:
    match = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _build(cls: type, raw: Any, prefix: str, origin: str):
    where = prefix.rstrip(".") or "the top level"
    if not isinstance(raw, dict):
        raise SrganError(f"{origin}: {where}: expected a mapping, got {_show(raw)}")
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # given_keys is no setting
    hints = {name: hint for name, hint in typing.get_type_hints(cls).items() if name in names}
    for key in raw:
        if key not in hints:
            raise SrganError(
                f"{origin}: unknown key {prefix}{key}{_closest(str(key), names)}; valid keys here: {', '.join(names)}"
            )
    values = {}
    for name in names:
        if name in raw:
            values[name] = _convert(hints[name], raw[name], prefix + name, origin)
    return cls(**values)


def _convert(hint: Any, value: Any, key: str, origin: str):
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, key + ".", origin)
    origin_type = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin_type in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(inner, value, key, origin)
    if origin_type is Literal:
        # by type too: 4.0 == 4, but a scale of 4.0 is a mistake to report
        if not any(value == a and type(value) is type(a) for a in args):
            choices = ", ".join(str(a) for a in args)
            raise SrganError(f"{origin}: {key}: expected one of {choices}, got {_show(value)}")
        return value
    if origin_type is dict:  # a mapping of names to values (loss.perceptual.layers)
        if not isinstance(value, dict):
            raise SrganError(f"{origin}: {key}: expected a mapping, got {_show(value)}")
        for name in value:
            if not isinstance(name, str):
                raise SrganError(f"{origin}: {key}: expected names as keys, got {_show(name)}")
        return {name: _convert(args[1], v, f"{key}.{name}", origin) for name, v in value.items()}
    if origin_type is list:
        if not isinstance(value, list):
            raise SrganError(f"{origin}: {key}: expected a list, got {_show(value)}")
        return [_convert(args[0], v, f"{key}[{i}]", origin) for i, v in enumerate(value)]
    if hint is bool:
        if not isinstance(value, bool):
            raise SrganError(f"{origin}: {key}: expected true or false, got {_show(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SrganError(f"{origin}: {key}: expected an integer, got {_show(value)}")
        return value
    if hint is float:
        number = value
        # PyYAML reads 1e-4 (no dot) as a string: accept any text float() reads.
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise SrganError(f"{origin}: {key}: expected a number, got {_show(value)}")
        try:
            number = float(number)
        except OverflowError:  # an integer beyond any float
            number = math.inf
        if not math.isfinite(number):
            raise SrganError(f"{origin}: {key}: expected a finite number, got {_show(value)}")
        return number
    if hint is str:
        if not isinstance(value, str):
            raise SrganError(f"{origin}: {key}: expected a string, got {_show(value)}")
        if "\x00" in value:
            raise SrganError(f"{origin}: {key}: expected a string without NUL characters")
        return value
    raise TypeError(f"unsupported config type {hint!r} for {key}")


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _one_perceptual_layer_setting(config: Config, raw: dict, origin: str) -> None:
    """loss.perceptual.layers replaces loss.perceptual.layer: the resolved
    config holds layer null then, and a config that names both is refused
    (it could mean either)."""
    perceptual = config.loss.perceptual
    given = (raw.get("loss") or {}).get("perceptual") or {}  # mappings: _build checked them
    if perceptual.layers is not None:
        if given.get("layer") is not None:
            raise SrganError(
                f"{origin}: loss.perceptual: layer {given['layer']!r} and layers both given; layers "
                "replaces layer: set one of them to null"
            )
        perceptual.layer = None
    elif perceptual.layer is None:
        raise SrganError(
            f"{origin}: loss.perceptual.layer: expected a VGG layer such as relu5_4 (null only "
            "with loss.perceptual.layers), got null"
        )


def _check_paired_data(c: Config, origin: str) -> None:
    """data.train_lr / data.val_lr: a folder beside a folder (or prepared set)
    of HR images; the built-in samples have no LR partners."""
    d = c.data
    for lr_key, lr_value, hr_key, hr_value in (
        ("data.train_lr", d.train_lr, "data.train", d.train),
        ("data.val_lr", d.val_lr, "data.val", d.val),
    ):
        if lr_value is None:
            continue
        if lr_value == "":
            raise SrganError(f"{origin}: {lr_key}: expected a folder of LR images or null, got ''")
        if hr_value is None:
            raise SrganError(f"{origin}: {lr_key}: given while {hr_key} is null (the LR images need their HR partners)")
        if hr_value == BUILTIN_SAMPLES:
            raise SrganError(
                f"{origin}: {lr_key}: paired data needs {hr_key} to be a folder of HR images, not {BUILTIN_SAMPLES} "
                "(the sample photos have no LR partners)"
            )
    if d.train_lr is not None and d.degradation != "bicubic":
        raise SrganError(
            f"{origin}: data.degradation: {d.degradation} with data.train_lr: the LR images are given, there is "
            "nothing to degrade (set data.degradation: bicubic, or data.train_lr: null)"
        )


def _check_values(c: Config, origin: str) -> None:
    def need(ok: bool, key: str, expected: str, got: Any) -> None:
        if not ok:
            raise SrganError(f"{origin}: {key}: expected {expected}, got {got!r}")

    need(
        c.name.strip() not in ("", ".", "..") and "/" not in c.name and "\\" not in c.name,
        "name",
        "a non-empty name without '/'",
        c.name,
    )
    # the default run folder is runs/<name>-<time>: a file name is at most 255 bytes
    need(len(c.name.encode("utf-8")) <= 200, "name", "at most 200 bytes (it names the run folder)", c.name[:40] + "...")
    for key, limit in LIMITS.items():
        section, name = key.split(".")
        value = getattr(getattr(c, section), name)
        need(value <= limit, key, f"at most {limit:,} (a limit of srgan's, far above any published model)", value)
    need(c.model.blocks >= 1, "model.blocks", "at least 1", c.model.blocks)
    need(c.model.channels >= 1, "model.channels", "at least 1", c.model.channels)
    need(c.model.d_channels >= 1, "model.d_channels", "at least 1", c.model.d_channels)
    need(0 < c.model.res_scale <= 1, "model.res_scale", "a factor in (0, 1]", c.model.res_scale)
    # The generator by model.arch (schema.ARCH_SCALES; rrdb: its size, from growth too).
    scales = ARCH_SCALES[c.model.arch]
    need(
        c.model.scale in scales,
        "model.scale",
        f"{', '.join(map(str, scales[:-1]))} or {scales[-1]} with model.arch {c.model.arch}",
        c.model.scale,
    )
    need(c.model.growth >= 1, "model.growth", "at least 1", c.model.growth)
    parameters = generator_parameters(c.model.arch, c.model.scale, c.model.blocks, c.model.channels, c.model.growth)
    if parameters > MAX_GENERATOR_PARAMETERS:
        raise SrganError(
            f"{origin}: model: an {c.model.arch} of {c.model.blocks} blocks x {c.model.channels} "
            f"channels (growth {c.model.growth}) has {parameters:,} weights, more than srgan's limit "
            f"of {MAX_GENERATOR_PARAMETERS:,}"
        )
    need(c.data.train != "", "data.train", "a folder or builtin:samples", c.data.train)
    need(c.data.val != "", "data.val", "a folder, builtin:samples or null", c.data.val)
    need(
        c.data.crop_size >= c.model.scale, "data.crop_size", f"at least model.scale ({c.model.scale})", c.data.crop_size
    )
    need(
        c.data.crop_size % c.model.scale == 0,
        "data.crop_size",
        f"a multiple of model.scale ({c.model.scale})",
        c.data.crop_size,
    )
    _check_paired_data(c, origin)
    need(c.data.batch_size >= 1, "data.batch_size", "at least 1", c.data.batch_size)
    metrics = c.train.val_metrics
    need(
        bool(metrics) and len(set(metrics)) == len(metrics), "train.val_metrics", "a list of distinct metrics", metrics
    )
    if c.train.best_by not in metrics:
        raise SrganError(
            f"{origin}: train.best_by: {c.train.best_by} is not among train.val_metrics ({', '.join(metrics)}): "
            "add it there or pick one of those"
        )
    need(c.data.workers >= 0, "data.workers", "0 or more", c.data.workers)
    need(c.data.repeat >= 1, "data.repeat", "at least 1", c.data.repeat)
    need(c.data.cache_mb >= 0, "data.cache_mb", "0 (never) or more MB", c.data.cache_mb)
    need(c.data.val_max_size >= 0, "data.val_max_size", "0 (no cap) or more", c.data.val_max_size)
    smallest_val = 2 * c.model.scale + 11  # the SSIM window once `scale` px are shaved from each border
    need(
        c.data.val_max_size == 0 or c.data.val_max_size - c.data.val_max_size % c.model.scale >= smallest_val,
        "data.val_max_size",
        f"0 or at least {smallest_val} px (the SSIM window after the border shave)",
        c.data.val_max_size,
    )
    for term in ("image", "adversarial", "perceptual", "tv"):
        weight = getattr(c.loss.weights, term)
        need(weight >= 0, f"loss.weights.{term}", "a weight of 0 or more", weight)
    network = c.loss.perceptual.network
    key = "loss.perceptual.layer" if c.loss.perceptual.layers is None else "loss.perceptual.layers"
    for layer, weight in perceptual_layers(c.loss.perceptual).items():
        if vgg_layer_count(network, layer) is None:
            blocks = len(VGG_BLOCKS[network])
            last = VGG_BLOCKS[network][-1]
            raise SrganError(
                f"{origin}: {key}: expected a {network} layer such as relu5_{last}, "
                f"conv2_2 or pool{blocks}, got {layer!r}"
            )
        need(weight > 0, f"{key}.{layer}", "a positive weight (leave a layer out rather than weight it 0)", weight)
    need(c.loss.perceptual.layers != {}, key, "at least one layer", c.loss.perceptual.layers)
    need(
        c.loss.perceptual.weights != "",
        "loss.perceptual.weights",
        "imagenet, auto, none or a file path",
        c.loss.perceptual.weights,
    )
    if c.loss.weights.perceptual > 0:
        for layer in perceptual_layers(c.loss.perceptual):
            pools = vgg_pool_count(network, layer)
            need(
                c.data.crop_size >= 2**pools,
                "data.crop_size",
                f"at least {2**pools} px: {key} {layer} comes after {pools} 2x2 poolings",
                c.data.crop_size,
            )
    # The discriminators' crops, and gradient accumulation (issue 26).
    crop = c.data.crop_size
    if c.gan.discriminator == "vgg":
        need(
            crop % 32 == 0 and crop <= 512,
            "data.crop_size",
            "a multiple of 32 up to 512 with gan.discriminator vgg (five stride-2 stages, then a dense layer "
            "over the (crop/32)^2 positions left, which grows with the crop's area)",
            crop,
        )
    if c.gan.discriminator == "unet":
        need(
            crop % 8 == 0,
            "data.crop_size",
            "a multiple of 8 with gan.discriminator unet (three stride-2 convs, whose outputs its "
            "upsampling path adds back)",
            crop,
        )
    if c.loss.sharpen_targets.any:
        need(
            c.data.crop_size > USM_REACH,
            "data.crop_size",
            f"more than {USM_REACH} px with loss.sharpen_targets (the unsharp mask's blur reads {USM_REACH} px "
            "each side, reflected at the border)",
            c.data.crop_size,
        )
    need(c.train.accumulate >= 1, "train.accumulate", "at least 1 (micro-batches a step)", c.train.accumulate)
    need(
        c.data.batch_size % c.train.accumulate == 0,
        "data.batch_size",
        f"a multiple of train.accumulate ({c.train.accumulate}): each step takes that many equal micro-batches",
        c.data.batch_size,
    )

    t = c.train
    need(t.epochs >= 1, "train.epochs", "at least 1", t.epochs)
    need(0 <= t.seed <= MAX_SEED, "train.seed", f"0 to {MAX_SEED}", t.seed)
    need(
        re.fullmatch(r"auto|cpu|cuda(:\d{1,3})?", t.device) is not None,
        "train.device",
        "auto, cpu, cuda or cuda:K",
        t.device,
    )
    need(t.dist_timeout_s >= 10, "train.dist_timeout_s", "at least 10 seconds", t.dist_timeout_s)
    need(t.max_steps >= 0, "train.max_steps", "0 (no limit) or more", t.max_steps)
    need(t.pretrain_steps >= 0, "train.pretrain_steps", "0 or more", t.pretrain_steps)
    need(t.lr_g > 0, "train.lr_g", "a positive learning rate", t.lr_g)
    need(t.lr_d > 0, "train.lr_d", "a positive learning rate", t.lr_d)
    need(len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas), "train.betas", "two numbers in [0, 1)", t.betas)
    milestones = t.lr_schedule.milestones
    need(
        all(m >= 1 for m in milestones) and milestones == sorted(set(milestones)),
        "train.lr_schedule.milestones",
        "increasing step numbers of at least 1",
        milestones,
    )
    need(t.lr_schedule.gamma > 0, "train.lr_schedule.gamma", "a positive factor", t.lr_schedule.gamma)
    need(
        0 <= t.lr_schedule.min_factor <= 1,
        "train.lr_schedule.min_factor",
        "a factor in [0, 1]",
        t.lr_schedule.min_factor,
    )
    need(t.lr_schedule.warmup_steps >= 0, "train.lr_schedule.warmup_steps", "0 or more", t.lr_schedule.warmup_steps)
    need(
        t.lr_schedule.kind != "cosine" or t.pretrain_steps > 0 or t.max_steps > 0,
        "train.lr_schedule.kind",
        "step, or cosine with train.pretrain_steps or train.max_steps set (the span of the decay)",
        t.lr_schedule.kind,
    )
    need(t.log_every >= 1, "train.log_every", "at least 1", t.log_every)
    need(t.val_every >= 0, "train.val_every", "0 (every epoch) or more steps", t.val_every)
    need(t.save_every >= 0, "train.save_every", "0 (every epoch) or more steps", t.save_every)
    need(0 <= t.ema_decay < 1, "train.ema_decay", "0 (off) or a decay in (0, 1)", t.ema_decay)
    need(t.checkpoint_every >= 1, "train.checkpoint_every", "at least 1 (epochs)", t.checkpoint_every)


def _check_degradation(c: Config, raw: dict, origin: str) -> None:
    """data.realesrgan: named only with data.degradation realesrgan (as
    ARCH_KEYS: a setting that would do nothing is a mistake to report);
    every range [min, max] with min <= max, every probability in [0, 1],
    the probabilities of one choice summing to 1."""
    if c.data.degradation != "realesrgan":
        if "realesrgan" in (raw.get("data") or {}):
            raise SrganError(
                f"{origin}: data.realesrgan: applies to data.degradation realesrgan only, not "
                f"{c.data.degradation} (leave it out, or set data.degradation: realesrgan)"
            )
        return

    def need(ok: bool, key: str, expected: str, got: Any) -> None:
        if not ok:
            raise SrganError(f"{origin}: data.realesrgan.{key}: expected {expected}, got {got!r}")

    def probability(key: str, value: float) -> None:
        need(0 <= value <= 1, key, "a probability in [0, 1]", value)

    def span(key: str, value: list[float], low: float, high: float, what: str) -> None:
        need(len(value) == 2, key, f"[min, max] ({what})", value)
        need(value[0] <= value[1], key, f"[min, max] with min <= max ({what})", value)
        need(low <= value[0] and value[1] <= high, key, f"a range within [{low:g}, {high:g}] ({what})", value)

    def sums_to_one(key: str, values: dict[str, float]) -> None:
        for name, value in values.items():
            probability(f"{key}.{name}", value)
        total = sum(values.values())
        need(abs(total - 1) <= 1e-6, key, f"probabilities {', '.join(values)} summing to 1", round(total, 9))

    def modes(key: str, value: typing.Sequence[str]) -> None:
        need(len(value) >= 1 and len(set(value)) == len(value), key, "one or more distinct modes", value)

    r = c.data.realesrgan
    for name, stage in (("first", r.first), ("second", r.second)):
        probability(f"{name}.blur_prob", stage.blur_prob)
        blur = stage.blur
        sizes = blur.kernel_sizes
        need(
            len(sizes) >= 1 and all(3 <= k <= MAX_KERNEL_SIZE and k % 2 == 1 for k in sizes),
            f"{name}.blur.kernel_sizes",
            f"one or more odd sizes from 3 to {MAX_KERNEL_SIZE}",
            sizes,
        )
        sums_to_one(f"{name}.blur.kernels", dataclasses.asdict(blur.kernels))
        span(f"{name}.blur.sigma", blur.sigma, 0.01, 100, "px")
        span(f"{name}.blur.betag", blur.betag, 0.01, 100, "a shape, 1 a Gaussian")
        span(f"{name}.blur.betap", blur.betap, 0.01, 100, "a shape")
        probability(f"{name}.blur.sinc_prob", blur.sinc_prob)
        span(f"{name}.blur.sinc_cutoff", blur.sinc_cutoff, 0.01, 1, "units of pi")
        span(f"{name}.blur.sinc_cutoff_small", blur.sinc_cutoff_small, 0.01, 1, "units of pi")
        resize = stage.resize
        sums_to_one(f"{name}.resize", {"up": resize.up, "down": resize.down, "keep": resize.keep})
        need(len(resize.range) == 2, f"{name}.resize.range", "[min, max] (a factor)", resize.range)
        need(
            0.01 <= resize.range[0] <= 1 <= resize.range[1] <= 4,  # 4: bounds the memory of a 2048 px crop
            f"{name}.resize.range",
            "[min, max] with 0.01 <= min <= 1 <= max <= 4 (down to min, up to max)",
            resize.range,
        )
        modes(f"{name}.resize.modes", resize.modes)
        noise = stage.noise
        probability(f"{name}.noise.gaussian_prob", noise.gaussian_prob)
        span(f"{name}.noise.gaussian_sigma", noise.gaussian_sigma, 0, 255, "on 0..255")
        span(f"{name}.noise.poisson_scale", noise.poisson_scale, 0, 100, "a factor")
        probability(f"{name}.noise.gray_prob", noise.gray_prob)
        span(f"{name}.jpeg_quality", stage.jpeg_quality, 1, 100, "Pillow's JPEG quality")
    final = r.final
    probability("final.sinc_prob", final.sinc_prob)
    span("final.sinc_cutoff", final.sinc_cutoff, 0.01, 1, "units of pi")
    probability("final.sinc_first_prob", final.sinc_first_prob)
    modes("final.modes", final.modes)
