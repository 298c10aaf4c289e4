"""`srgan train --sweep KEY=V1,V2 ...`: the variants of a config (a grid when
several keys are swept), trained one after another, each in its own run
folder named after its settings, inside one sweep folder whose sweep.yaml
records the plan. Every variant's config is checked before the first one
trains; `--resume SWEEP` skips the finished variants and continues the
others. A sweep folder holds a sweep and nothing else: a sweep is refused in
a folder that holds a run (or anything else), and the plan read back from
sweep.yaml is checked as strictly as the command line that wrote it."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from srgan.configs import Config, load_config
from srgan.configs.loader import DEFAULT_PRESET, _show, read_yaml_file
from srgan.files import write_text
from srgan.files.errors import SrganError
from srgan.training.loop import train
from srgan.training.run_folder import RUN_FILES
from srgan.training.runs import summarize
from srgan.training.signals import TrainingInterrupted

log = logging.getLogger("srgan")

SWEEP_FILE = "sweep.yaml"
PLAN_KEYS = ("config", "overrides", "sweep", "variants")
# What says a folder holds a run (or the start of one).
RUN_ENTRIES = ("config.yaml", "checkpoints", *RUN_FILES)
# Far above any grid one trains one variant after another; a tampered plan
# cannot make the grid (and the configs checked up front) endless.
MAX_VARIANTS = 1000
MAX_KEYS = 64
# A value's part of a folder name, and the name's bytes before its hash
# suffix: file systems allow 255 bytes a name.
MAX_VALUE_CHARS = 60
MAX_NAME_BYTES = 200


@dataclass
class Variant:
    name: str  # its run folder's name, e.g. perceptual=0.006,lr_g=0.001
    settings: list[str]  # KEY=VALUE overrides


def parse_sweep(items: list[str]) -> list[tuple[str, list[str]]]:
    """KEY=V1,V2 items -> (key, values)."""
    axes: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        values = split_values(text) if sep else []
        if not key or not values or any(v == "" for v in values):
            raise SrganError(f"--sweep {item!r}: expected KEY=V1,V2[,...], e.g. --sweep train.lr_g=1e-4,1e-3")
        axes.append((key, values))
    check_axes(axes, "--sweep")
    return axes


def split_values(text: str) -> list[str]:
    """V1,V2,... split on the commas outside brackets: [0.9, 0.999] or
    {lr_g: 1, lr_schedule: {gamma: 0.5}} is one value."""
    values, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    values.append(text[start:].strip())
    return values


def check_axes(axes: list[tuple[str, list[str]]], where: str) -> None:
    """What a grid must be, from the command line or read back from a plan."""
    if not axes:
        raise SrganError(f"{where}: expected at least one key")
    if len(axes) > MAX_KEYS:
        raise SrganError(f"{where}: {len(axes)} keys; a sweep varies at most {MAX_KEYS}")
    seen = set()
    for key, _ in axes:
        if key in seen:
            raise SrganError(f"{where}: {key} given twice; list all its values once")
        seen.add(key)
    count = 1
    for _, values in axes:
        count *= len(values)
        if count > MAX_VARIANTS:  # stop multiplying here: a tampered plan may ask for 10**1000
            raise SrganError(
                f"{where}: more than {MAX_VARIANTS:,} variants; a sweep trains at most "
                f"{MAX_VARIANTS:,}, one after another"
            )


def variants_of(axes: list[tuple[str, list[str]]], where: str = "--sweep") -> list[Variant]:
    """The grid, in order: the last key varies fastest."""
    last = [key.split(".")[-1] for key, _ in axes]  # the last part of the key, unless two swept keys share it
    short = {key: key if last.count(part) > 1 else part for (key, _), part in zip(axes, last, strict=True)}
    variants = []
    for values in itertools.product(*(values for _, values in axes)):
        pairs = list(zip((key for key, _ in axes), values, strict=True))
        name = folder_name([(short[key], value) for key, value in pairs])
        variants.append(Variant(name, [f"{key}={value}" for key, value in pairs]))
    if len({v.name for v in variants}) != len(variants):
        raise SrganError(f"{where}: two variants would share a folder name; give distinct values")
    return variants


def folder_name(pairs: list[tuple[str, str]]) -> str:
    """key=value,... with each value made file-safe and cut to 60 characters.
    A name with a value cut, or too long for a file system, keeps its first
    200 bytes and ends with 8 hex digits of the SHA-256 of the whole name:
    distinct settings keep distinct names, the same settings the same name
    (a resumed sweep finds its folders)."""
    whole = ",".join(f"{key}={_file_safe(value)}" for key, value in pairs)
    name = ",".join(f"{key}={_file_safe(value)[:MAX_VALUE_CHARS]}" for key, value in pairs)
    if name == whole and len(name.encode()) <= MAX_NAME_BYTES:
        return name
    prefix = name.encode()[:MAX_NAME_BYTES].decode("utf-8", errors="ignore")  # whole characters only
    return f"{prefix}-{hashlib.sha256(whole.encode()).hexdigest()[:8]}"


def _file_safe(value: str) -> str:
    return re.sub(r"[^\w.+\-=\[\],]", "_", value.replace(" ", ""))


def run_sweep(source: str | None, overrides: list[str], sweep: list[str], resume: Path | None = None) -> list[Path]:
    """Train every variant not finished yet; returns the variants' run folders.
    A variant that fails (a diverging loss, say) is reported and the sweep
    goes on; a signal stops the sweep after saving the variant under way."""
    if resume is not None:
        folder, source, base_overrides, axes = read_sweep(resume)
        overrides = [*base_overrides, *overrides]  # --set on a resume applies to every variant
        skip_finished = len(overrides) == len(base_overrides)
    else:
        axes = parse_sweep(sweep)
        base = load_config(source, overrides)
        folder = Path(base.train.run_dir) if base.train.run_dir else default_sweep_dir(base)
        check_new_sweep_folder(folder)
        base_overrides, skip_finished = list(overrides), True
    variants = variants_of(axes)
    configs: list[tuple[Variant, Config]] = [
        (v, load_config(source, [*overrides, *v.settings, f"train.run_dir={folder / v.name}"])) for v in variants
    ]  # all checked before the first one trains
    if resume is None:
        plan = {
            "config": source or DEFAULT_PRESET,
            "overrides": base_overrides,
            "sweep": [{"key": key, "values": values} for key, values in axes],
            "variants": [v.name for v in variants],
        }
        write_text(folder / SWEEP_FILE, yaml.safe_dump(plan, sort_keys=False))
    log.info("sweep %s: %d variants of %s", folder, len(variants), source or DEFAULT_PRESET)
    failed = []
    for number, (variant, config) in enumerate(configs, start=1):
        run_dir = folder / variant.name
        state = summarize(run_dir)["state"] if run_dir.is_dir() else None
        if skip_finished and state == "finished":
            log.info("sweep: %d/%d %s is finished; skipping it", number, len(configs), variant.name)
            continue
        log.info("sweep: %d/%d %s", number, len(configs), variant.name)
        started = (run_dir / "checkpoints" / "last.pt").is_file()
        try:
            train(config, resume=run_dir if started else None)
        except TrainingInterrupted as stop:
            raise TrainingInterrupted(
                stop.signum, f"{stop}; the sweep stops here: continue it with srgan train --resume {folder}"
            ) from None
        except SrganError as error:
            log.warning("sweep: %s failed: %s; going on with the next variant", variant.name, error)
            failed.append(variant.name)
    if failed:
        log.warning("sweep: %d of %d variants failed: %s", len(failed), len(configs), ", ".join(failed))
    return [folder / v.name for v in variants]


def check_new_sweep_folder(folder: Path) -> None:
    """A new sweep goes into a new or empty folder: in a run's folder its
    sweep.yaml would turn `--resume RUN` into a resume of the sweep."""
    if not (folder.exists() or folder.is_symlink()):
        return
    if not folder.is_dir():
        raise SrganError(f"train.run_dir: {folder} is a file, not a folder")
    if is_sweep(folder):
        raise SrganError(f"{folder}: already holds a sweep; continue it with --resume {folder}")
    entries = sorted(p.name for p in folder.iterdir())
    run = [name for name in entries if name in RUN_ENTRIES]
    if run:
        raise SrganError(
            f"train.run_dir: {folder} holds a run ({', '.join(run)}); a sweep needs a folder of its "
            f"own: choose another train.run_dir (the run goes on with srgan train --resume {folder})"
        )
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise SrganError(
            f"train.run_dir: {folder} is not empty ({shown}) and holds no sweep; a sweep needs a new "
            "or empty folder: choose another train.run_dir"
        )


def read_sweep(folder: Path) -> tuple[Path, str, list[str], list[tuple[str, list[str]]]]:
    """The plan a sweep folder's sweep.yaml records, checked as the command
    line that wrote it was: its shape, the grid, the variants' folder names
    and every variant's config. Each problem is one line naming sweep.yaml."""
    folder = Path(folder)
    path = folder / SWEEP_FILE

    def refuse(problem: str) -> SrganError:
        return SrganError(f"{path}: {problem}")

    def mapping(value, where: str, keys: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            raise refuse(f"{where}expected a mapping of {', '.join(keys[:-1])} and {keys[-1]}, got {_show(value)}")
        for key in value:
            if key not in keys:
                raise refuse(f"{where}unknown key {key}; expected {', '.join(keys[:-1])} and {keys[-1]}")
        for key in keys:
            if key not in value:
                raise refuse(f"{where}missing {key}; expected {', '.join(keys[:-1])} and {keys[-1]}")
        return value

    def strings(value, where: str) -> list[str]:
        if not isinstance(value, list):
            raise refuse(f"{where}: expected a list, got {_show(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise refuse(f"{where}[{i}]: expected a string, got {_show(item)}")
        return value

    plan = mapping(read_yaml_file(path, "sweep plan", unique_keys=True), "", PLAN_KEYS)
    source = plan["config"]
    if not isinstance(source, str) or not source.strip():
        raise refuse(f"config: expected a preset name or a YAML path, got {_show(source)}")
    overrides = strings(plan["overrides"], "overrides")
    if not isinstance(plan["sweep"], list):
        raise refuse(f"sweep: expected a list, got {_show(plan['sweep'])}")
    axes = []
    for i, axis in enumerate(plan["sweep"]):
        axis = mapping(axis, f"sweep[{i}]: ", ("key", "values"))
        key, values = axis["key"], strings(axis["values"], f"sweep[{i}].values")
        if not isinstance(key, str):
            raise refuse(f"sweep[{i}].key: expected a string, got {_show(key)}")
        if not values:
            raise refuse(f"sweep[{i}].values: expected at least one value")
        for j, value in enumerate(values):
            if not value.strip():
                raise refuse(f"sweep[{i}].values[{j}]: expected a value, got {value!r}")
        if not key.strip() or "=" in key or split_values(",".join(values)) != values:
            raise refuse(
                f"sweep[{i}]: not what --sweep KEY=V1,V2 gives (a key without '=', values without "
                "spaces at their ends or commas outside brackets)"
            )
        axes.append((key, values))
    check_axes(axes, f"{path}: sweep")
    variants = variants_of(axes, f"{path}: sweep")
    names = strings(plan["variants"], "variants")
    if names != [v.name for v in variants]:
        raise refuse(
            f"variants: expected the grid's folder names ({len(variants)}, the first "
            f"{variants[0].name!r}), got {len(names)}" + (f", the first {names[0]!r}" if names else "")
        )
    try:  # every config, as the plan alone makes it (a --set on the resume is the user's own)
        load_config(source, overrides)
        for v in variants:
            load_config(source, [*overrides, *v.settings, f"train.run_dir={folder / v.name}"])
    except SrganError as error:
        raise refuse(str(error)) from None
    return folder, source, list(overrides), axes


def is_sweep(folder: Path) -> bool:
    """Whether `folder` holds a sweep.yaml, of whatever kind: a folder or a
    FIFO of that name is a broken plan to refuse, not a run to resume."""
    return os.path.lexists(Path(folder) / SWEEP_FILE)


def default_sweep_dir(config: Config) -> Path:
    return Path("runs") / f"{config.name}-sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
