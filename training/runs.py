"""What a run folder says about its run, for `srgan runs` and `srgan plot`:
its settings against its preset, how far it got, in what state, its best
validation and its last GAN values. Read from the small files a run writes
(config.yaml, run.json, validation.csv, metrics.jsonl), never a checkpoint,
and only from regular files: a broken folder (a FIFO, a link to a device,
wrong types, JSON nested too deeply) gives a row that says what is wrong,
and the others are listed as ever."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from srgan.configs import Config, config_from_dict, config_to_dict, load_config, preset_names
from srgan.configs.loader import read_yaml_file
from srgan.files import parse_json, read_regular_text
from srgan.files.errors import SrganError
from srgan.files.lock import holder_alive, read_holder
from srgan.metrics import parse_metric_names
from srgan.training.logs import OPTIONAL_METRICS, is_number, read_run_logs
from srgan.training.pictures import draw_curves
from srgan.training.run_folder import STATES, STATUS_NAME

GAN_VALUES = ("d_loss", "g_loss", "d_score", "g_score")
# Keys that differ between any two runs without saying anything about them.
IGNORED_KEYS = ("name", "train.run_dir")
MAX_STATUS_BYTES = 1 << 16  # run.json is one short line


def find_runs(folder: Path) -> list[Path]:
    """Run folders (with a config.yaml) at or below `folder`, in name order;
    a config.yaml that is no regular file makes a broken one, not none.
    Raises SrganError when `folder` is not a folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SrganError(f"{folder}: no such folder")
    found = {path.parent for path in folder.rglob("config.yaml") if not path.is_dir()}
    return sorted(found)


def read_run_config(run: Path) -> Config:
    """The run's config.yaml; raises SrganError, naming the file, when it is missing or not a valid config."""
    path = run / "config.yaml"
    if not os.path.lexists(path):
        raise SrganError(f"{run}: no config.yaml")
    raw = read_yaml_file(path, "config")
    if not isinstance(raw, dict):
        raise SrganError(f"{path}: not a mapping")
    return config_from_dict(raw, str(path))


def flat_settings(config: Config) -> dict[str, object]:
    """Dotted key -> value, the ignored keys left out."""
    flat: dict[str, object] = {}

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif prefix + key not in IGNORED_KEYS:
                flat[prefix + key] = value

    walk(config_to_dict(config), "")
    return flat


def preset_changes(config: Config) -> dict[str, object]:
    """The settings in which `config` differs from the preset it names (or
    from the defaults when its name is no preset)."""
    base = load_config(config.name) if config.name in preset_names() else Config(name=config.name)
    ours, theirs = flat_settings(config), flat_settings(base)
    return {key: value for key, value in ours.items() if theirs.get(key) != value}


def differing_settings(configs: list[Config]) -> list[str]:
    """The keys whose values are not the same in every config."""
    flats = [flat_settings(c) for c in configs]
    keys = sorted({k for flat in flats for k in flat})
    return [k for k in keys if len({json.dumps(flat.get(k), sort_keys=True) for flat in flats}) > 1]


def run_labels(runs: list[Path], configs: list[Config] | None = None) -> list[str]:
    """A legend entry a run: the settings in which the runs differ (and its
    folder's name where those do not tell it from another run). `configs`:
    the runs' configs, when the caller has read them."""
    configs = configs if configs is not None else [read_run_config(run) for run in runs]
    keys = differing_settings(configs)
    settings = []
    for config in configs:
        flat = flat_settings(config)
        settings.append(", ".join(f"{key.split('.')[-1]}={short_value(flat.get(key))}" for key in keys))
    return [
        shown if shown and settings.count(shown) == 1 else f"{run.name}" + (f" ({shown})" if shown else "")
        for run, shown in zip(runs, settings, strict=True)
    ]


def plot_runs(
    runs: list[Path],
    output: Path | None,
    force: bool = False,
    names: list[str] | None = None,
    psnr_only: bool = False,
    metric: str = "psnr",
) -> Path:
    """`srgan plot`: draw the curves of the runs named (a folder of runs
    stands for every run below it) into `output`, or into RUN/curves.png for
    one run. Returns the picture's path. A broken run among several is
    skipped with a warning saying why; raises SrganError for a run that is
    none, a broken single run, options that disagree with the runs found, or
    a missing matplotlib."""
    if len(parse_metric_names(metric, "--metric")) != 1:
        raise SrganError(f"--metric {metric}: expected one metric")
    folders = runs_to_plot(runs)
    if output is None and len(folders) > 1:
        raise SrganError(f"-o: {len(folders)} runs to draw: name the picture to write, e.g. -o runs.png")
    if output is not None and output.suffix.lower() != ".png":
        raise SrganError(f"-o {output}: expected a file name ending in .png")
    if names and len(names) != len(folders):
        raise SrganError(f"--label: {len(names)} given for {len(folders)} runs; give one a run, in order")
    drawn, series, labels = read_plotted_runs(runs, folders, names or [])
    try:
        return draw_curves(
            drawn,
            output or drawn[0] / "curves.png",
            overwrite=output is None or force,
            labels=labels,
            psnr_only=psnr_only,
            series=series,
            metric=metric,
        )
    except ImportError:
        raise SrganError("srgan plot needs matplotlib: pip install 'srgan[plot]'") from None


def _has_metrics(folder: Path) -> bool:
    """Whether `folder` is a run to plot: whatever its metrics.jsonl is (a FIFO
    in its place makes a broken run, said so when it is read)."""
    return os.path.lexists(folder / "metrics.jsonl")


def runs_to_plot(runs: list[Path]) -> list[Path]:
    """The run folders `srgan plot` draws: each one named, or every run below
    a folder of runs. Raises SrganError for a folder that is neither."""
    folders = []
    for run in runs:
        if _has_metrics(run):
            folders.append(run)
        elif run.is_dir() and (found := [r for r in find_runs(run) if _has_metrics(r)]):
            folders.extend(found)
        else:
            raise SrganError(f"{run}: not a run folder (no metrics.jsonl), nor a folder of runs")
    return folders


def read_plotted_runs(
    runs: list[Path], folders: list[Path], names: list[str]
) -> tuple[list[Path], list[tuple[list[dict], list[dict]]], list[str] | None]:
    """(the runs drawn, their read_run_logs, their legend labels or None for
    one run's own picture). A broken run among several is skipped with a
    warning saying why, and its --label with it; the labels not given are
    the settings in which the drawn runs differ. Raises SrganError for a
    broken run alone, or when every run is broken."""
    drawn: list[Path] = []
    series: list[tuple[list[dict], list[dict]]] = []
    configs: list[Config] = []  # for the legend, when it is made from the settings
    kept_names: list[str] = []
    for i, folder in enumerate(folders):
        try:
            logs = read_run_logs(folder)
            config = read_run_config(folder) if len(folders) > 1 and not names else None
        except SrganError as error:
            if len(folders) == 1:
                raise
            logging.getLogger("srgan").warning("skipping %s: %s", folder, error)
            continue
        drawn.append(folder)
        series.append(logs)
        if config is not None:
            configs.append(config)
        kept_names.extend(names[i : i + 1])
    if not drawn:
        raise SrganError(
            f"{' '.join(map(str, runs))}: no run to draw: the {len(folders)} found are all broken "
            "(the lines above say how)"
        )
    labels = kept_names or (run_labels(drawn, configs) if len(drawn) > 1 else None)
    return drawn, series, labels


def summarize(run: Path) -> dict:
    """One row of `srgan runs`; "problem" says what is wrong with a broken folder."""
    row: dict = {
        "run": str(run),
        "name": run.name,
        "preset": None,
        "changes": {},
        "step": None,
        "planned_steps": None,
        "state": None,
        "best_psnr": None,
        "best_ssim": None,
        "best_step": None,
        "last_psnr": None,
        "last_ssim": None,
        "bicubic_psnr": None,
        "bicubic_ssim": None,
        # the learned metrics and the colour difference (lower is better), for the runs that validated with them
        **{f"{kind}_{name}": None for name in OPTIONAL_METRICS for kind in ("best", "last", "bicubic")},
        # which way the colour went at the last validation (SR - HR), beside ciede2000
        "last_shift_a": None,
        "last_shift_b": None,
        **{name: None for name in GAN_VALUES},
        "wall_seconds": None,
        "problem": None,
    }
    try:
        config = read_run_config(run)
        row["preset"] = config.name
        row["changes"] = preset_changes(config)
        row.update(_status(run))
        rows, validations = read_run_logs(run)
        scored = [v for v in validations if v["psnr"]]
        finite = [v for v in scored if math.isfinite(float(v["psnr"]))]  # a NaN would win or lose by its place
        if finite:
            best = max(finite, key=lambda v: float(v["psnr"]))
            row.update(
                best_psnr=_number(best["psnr"]),
                best_ssim=_number(best["ssim"]),
                best_step=int(best["step"]),
                bicubic_psnr=_number(best["bicubic_psnr"]),
                bicubic_ssim=_number(best["bicubic_ssim"]),
            )
        if scored:
            # the last too: a GAN phase trades PSNR away after the best, which "best" alone would hide
            row.update(last_psnr=_number(scored[-1]["psnr"]), last_ssim=_number(scored[-1]["ssim"]))
        for name in OPTIONAL_METRICS:
            chosen = [v for v in validations if v[name] and math.isfinite(float(v[name]))]
            if chosen and name == "ciede2000":
                row.update(last_shift_a=_number(chosen[-1]["shift_a"]), last_shift_b=_number(chosen[-1]["shift_b"]))
            if chosen:
                least = min(chosen, key=lambda v: float(v[name]))
                row.update(
                    {
                        f"best_{name}": _number(least[name]),
                        f"last_{name}": _number(chosen[-1][name]),
                        f"bicubic_{name}": _number(least[f"bicubic_{name}"]),
                    }
                )
        for name in GAN_VALUES:
            row[name] = next((value for r in reversed(rows) if (value := _float(r.get(name))) is not None), None)
        if row["step"] is None and rows:
            row["step"] = rows[-1]["step"]
    except SrganError as error:
        row["problem"] = str(error)
        row["state"] = "broken"
    except (OSError, ValueError) as error:
        row["problem"] = f"{run}: {error.__class__.__name__}: {error}"
        row["state"] = "broken"
    return row


def _status(run: Path) -> dict:
    """state, step, planned steps and wall time from run.json, and whether a
    process holds the run's lock (a "running" record without one is a run
    that died without a word)."""
    path = run / STATUS_NAME
    if not os.path.lexists(path):  # a run from before run.json, or one that never reached its first step
        if _locked(run):
            return {"state": "running"}
        return {"state": "stopped" if (run / "checkpoints" / "last.pt").is_file() else "not started"}
    try:
        status = parse_json(read_regular_text(path, MAX_STATUS_BYTES, "run.json"))
        if not isinstance(status, dict):
            raise ValueError("not a mapping")
    except ValueError as error:
        raise SrganError(f"{path}: damaged ({error})") from None
    _check_status(path, status)
    state = status.get("state")
    if _locked(run):
        state = "running"
    elif state == "running":
        state = "killed"  # its process is gone and said nothing: SIGKILL, a power cut, an OOM kill
    result = {
        "state": state,
        "step": status.get("step"),
        "planned_steps": status.get("planned_steps"),
        "wall_seconds": status.get("wall_seconds"),
    }
    if status.get("reason"):
        result["problem"] = status["reason"]
    return result


def _check_status(path: Path, status: dict) -> None:
    """run.json's values have the types run_folder writes, or the folder is
    broken, naming the key: a hand edit or a copy tool must not reach the
    table as a format error."""

    def fail(key: str, expected: str):
        shown = repr(status[key])
        raise SrganError(f"{path}: {key}: expected {expected}, got {shown if len(shown) <= 40 else shown[:37] + '...'}")

    if "state" not in status:
        raise SrganError(f"{path}: state: missing; expected one of {', '.join(STATES)}")
    if status["state"] not in STATES:
        fail("state", f"one of {', '.join(STATES)}")
    for key in ("step", "planned_steps"):
        value = status.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63):
            fail(key, "a whole number of steps, at least 0")
    wall = status.get("wall_seconds")
    if wall is not None and ((seconds := _float(wall)) is None or not 0 <= seconds < math.inf):
        fail("wall_seconds", "a finite number of seconds, at least 0")
    if status.get("reason") is not None and not isinstance(status["reason"], str):
        fail("reason", "a line of text")


def _locked(run: Path) -> bool:
    """Whether the process recorded in the run's lock file is alive. Read,
    not locked: probing the flock could make a run starting at that moment
    think the folder is taken."""
    return holder_alive(read_holder(run))


def _float(value) -> float | None:
    """A logged number as a float (NaN and infinities included); None for
    anything else, and for an integer too large for a float."""
    if not is_number(value):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _number(field: str) -> float | None:
    """A numeric field of validation.csv (read_csv checked it), None when empty."""
    return float(field) if field else None


def rows_as_json(rows: list[dict]) -> str:
    """The rows as JSON: NaN and the infinities, which JSON lacks, become null."""

    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(item) for item in value]
        return value

    return json.dumps(clean(rows), indent=2, allow_nan=False)


def sort_rows(rows: list[dict]) -> list[dict]:
    """Best validation PSNR first; runs without one, then broken ones, last."""
    return sorted(
        rows,
        key=lambda r: (
            r["problem"] is not None and r["preset"] is None,
            r["best_psnr"] is None,
            -(r["best_psnr"] or 0.0),
            r["name"],
        ),
    )


def format_runs(rows: list[dict], root: Path | None = None) -> str:
    """The table `srgan runs` prints: runs named by their path below `root`,
    settings last (they are the long column), keys shortened to their last
    part where that is unambiguous."""

    def show(value, fmt):
        return "-" if value is None else format(value, fmt)

    keys = {key for r in rows for key in r["changes"]}
    learned = [name for name in OPTIONAL_METRICS if any(r[f"best_{name}"] is not None for r in rows)]  # a column each
    last = [key.split(".")[-1] for key in keys]
    short = {key: key if last.count(key.split(".")[-1]) > 1 else key.split(".")[-1] for key in keys}
    table = [
        (
            "run",
            "preset",
            "steps",
            "state",
            "PSNR best / last / bicubic",
            "SSIM best / last / bicubic",
            *(f"{name.upper().replace('_', '-')} best / last / bicubic" for name in learned),
            *(["a*/b* shift last"] if "ciede2000" in learned else []),
            *GAN_VALUES,
            "wall",
            "settings that differ from the preset",
        )
    ]
    for r in rows:
        name = str(Path(r["run"]).relative_to(root)) if root and Path(r["run"]).is_relative_to(root) else r["name"]
        changes = ", ".join(f"{short[k]}={short_value(v)}" for k, v in r["changes"].items()) or "-"
        steps = f"{show(r['step'], 'd')}/{show(r['planned_steps'], 'd')}"
        psnr = " / ".join(show(r[key], ".2f") for key in ("best_psnr", "last_psnr", "bicubic_psnr"))
        ssim = " / ".join(show(r[key], ".4f") for key in ("best_ssim", "last_ssim", "bicubic_ssim"))
        wall = "-" if r["wall_seconds"] is None else _duration(r["wall_seconds"])
        table.append(
            (
                name if name != "." else r["name"],
                r["preset"] or "-",
                steps,
                r["state"] or "-",
                psnr,
                ssim,
                *(
                    " / ".join(show(r[f"{kind}_{name}"], ".4f") for kind in ("best", "last", "bicubic"))
                    for name in learned
                ),
                *(
                    [f"{show(r['last_shift_a'], '+.2f')} / {show(r['last_shift_b'], '+.2f')}"]
                    if "ciede2000" in learned
                    else []
                ),
                *(show(r[n], ".4f") for n in GAN_VALUES),
                wall,
                changes,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in table]
    lines.insert(1, "-" * len(lines[0]))
    for r in rows:
        if r["problem"]:
            lines.append(f"{r['run']}: {r['problem']}")
    return "\n".join(lines)


def short_value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
