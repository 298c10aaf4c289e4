"""YAML -> typed `Config`: presets by name or files by path, `--set`
overrides, the types of every key; configs/checks.py checks the values of
every config built here.

Each error names the dotted key (and the file) and what was expected."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from srgan.configs.checks import check_config
from srgan.configs.schema import Config, arch_has_key
from srgan.files.errors import SrganError
from srgan.files.reading import read_regular_bytes

DEFAULT_PRESET = "demo"
MAX_CONFIG_BYTES = 1 << 20  # a YAML config is a page of text


def preset_names() -> list[str]:
    """The names of the presets shipped beside this module, sorted."""
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
    """The Config of a preset name or a YAML path (default: the demo preset), then `key.path=value`
    overrides; SrganError naming the file (or --set), the key and what was expected at the first mistake."""
    source = source or DEFAULT_PRESET
    raw, origin, stem = _read_source(source)
    raw.setdefault("name", stem)
    config = config_from_dict(raw, origin)  # check the file alone first, so that its mistakes name the file, not --set
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
    srresnet-only keys (model.norm, ...) no longer apply, and are no mistake
    of the user's: drop them. Keep a key that --set names itself, so that the
    checks refuse it if it does not apply."""
    named = {item.partition("=")[0].strip() for item in overrides}
    model = raw.get("model")
    if "model.arch" not in named or not isinstance(model, dict):
        return
    for key in list(model):
        if not arch_has_key(str(model.get("arch")), str(key)) and f"model.{key}" not in named:
            del model[key]


def _drop_degradation_settings_if_bicubic(raw: dict, overrides: list[str] | tuple[str, ...]) -> None:
    """`--set data.degradation=bicubic` on a realesrgan preset: the preset's
    data.realesrgan no longer applies; drop it, as another arch's model keys.
    Keep a data.realesrgan key that --set names itself, so that the checks refuse it."""
    named = {item.partition("=")[0].strip() for item in overrides}
    data = raw.get("data")
    if "data.degradation" not in named or not isinstance(data, dict) or data.get("degradation") == "realesrgan":
        return
    if "realesrgan" in data and not any(key.startswith("data.realesrgan") for key in named):
        del data["realesrgan"]


def config_from_dict(raw: dict, origin: str = "config") -> Config:
    """Type-check a plain dict (from YAML or a checkpoint) into a `Config`; SrganError naming
    `origin`, the key and what was expected at the first mistake."""
    config = _build(Config, raw, "", origin)
    check_config(config, raw, origin)
    return config


def config_to_dict(config: Config) -> dict:
    """The config as plain values: the keys of its model.arch only (the
    loader would refuse a key of another arch when it loads the dict again)."""
    values = dataclasses.asdict(config)
    del values["given_keys"]  # how the config was written, not a setting
    for key in list(values["model"]):
        if not arch_has_key(config.model.arch, key):
            del values["model"][key]
    if config.data.degradation != "realesrgan":
        del values["data"]["realesrgan"]  # refused with bicubic, as another arch's keys are
    return values


def config_to_yaml(config: Config) -> str:
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


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
    """The parsed YAML `what` ("config", "sweep plan") of at most
    MAX_CONFIG_BYTES that anyone may have edited (see parse_yaml); SrganError
    for a file too large, not regular, not UTF-8 or not YAML. It reads with
    read_regular_bytes (a FIFO would wait forever, a device never ends)."""
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
        # (_build refuses its unknown keys with their dotted path)
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
    if hint is Any:  # model.options: YAML values, which the architecture's constructor judges
        return value
    if origin_type in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) > 1:  # int | Literal["auto"]: the first that takes the value
            for each in inner:
                try:
                    return _convert(each, value, key, origin)
                except SrganError:
                    pass
            kinds = [
                "one of " + ", ".join(map(str, typing.get_args(a)))
                if typing.get_origin(a) is Literal
                else {int: "an integer"}.get(a, f"a {getattr(a, '__name__', a)}")
                for a in inner
            ]
            raise SrganError(f"{origin}: {key}: expected {' or '.join(kinds)}, got {_show(value)}")
        return _convert(inner[0], value, key, origin)
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
