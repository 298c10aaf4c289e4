"""What a run writes as it goes: metrics.jsonl (a row per `log_every` steps,
the means over those steps), epochs.csv (a row per epoch) and
validation.csv (a row per validation). Step values stay on the device until
a row is due: one host sync per row, none per step.

The run appends to the files, so a kill or a full disk mid-append can leave
a torn last line: the readers here drop such a line (with a warning) and
refuse any other damage, naming the file and the line. They read regular
files only, of at most MAX_LOG_BYTES: they refuse a FIFO or a link to
/dev/zero in a run folder rather than wait on it or read it without end."""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from srgan.files import DiskFull, parse_json, read_regular_text, write_text
from srgan.files.atomic import FULL_DISK_ERRNOS
from srgan.files.errors import SrganError
from srgan.metrics.learned import BACKBONES
from srgan.metrics.scores import metric_columns

log = logging.getLogger("srgan")

ARTEFACT_TERMS = ("ldl", "ffl", "ms_ssim", "colour", "luma")  # losses/criterion.py's artefact and colour terms
LOSS_TERMS = ("image", "adversarial", "perceptual", "tv", *ARTEFACT_TERMS)
GRADIENT_NORMS = ("g_grad_norm", "d_grad_norm")  # logged with train.grad_clip, before clipping
EPOCH_COLUMNS = ("epoch", "step", "d_loss", "g_loss", "d_score", "g_score", *LOSS_TERMS, "psnr", "ssim", "seconds")
VALIDATION_COLUMNS = ("epoch", "step", "psnr", "ssim", "bicubic_psnr", "bicubic_ssim")
LEARNED_METRICS = tuple(BACKBONES)
# the metrics beyond PSNR/SSIM: each chosen one adds its columns (metric_columns) and bicubic's, in this order
OPTIONAL_METRICS = (*LEARNED_METRICS, "ciede2000")


def epoch_columns(val_metrics: Sequence[str]) -> tuple[str, ...]:
    """epochs.csv's header: the losses, PSNR/SSIM and seconds, then the chosen optional metrics' columns."""
    return EPOCH_COLUMNS + metric_columns([name for name in OPTIONAL_METRICS if name in val_metrics])


def validation_columns(val_metrics: Sequence[str]) -> tuple[str, ...]:
    """validation.csv's header: PSNR/SSIM always (empty when not chosen), then the chosen optional metrics' columns."""
    chosen = metric_columns([name for name in OPTIONAL_METRICS if name in val_metrics])
    return VALIDATION_COLUMNS + tuple(column for name in chosen for column in (name, f"bicubic_{name}"))


# A metrics row is a few hundred bytes, so this limit allows about a million
# rows. A larger file is no log srgan wrote (a sparse file, a copy gone
# wrong), and reading it whole would take the memory of several times its size.
MAX_LOG_BYTES = 256 << 20


class NonFiniteLoss(SrganError):
    """A loss became inf or NaN; the run stops before it writes a checkpoint."""


class MetricLog:
    """The run's logged values. Under several ranks every rank adds its own
    step values, `reduce` averages them over the ranks when a row is due (one
    collective per row), and only the rank that `write`s touches the files."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: TensorBoard | None = None,
        write: bool = True,
        reduce=lambda values: values,
        extra: dict | None = None,
        val_metrics: Sequence[str] = ("psnr", "ssim"),
    ):
        self.jsonl_path = run_dir / "metrics.jsonl"
        self.csv_path = run_dir / "epochs.csv"
        self.validation_path = run_dir / "validation.csv"
        self.epoch_columns = epoch_columns(val_metrics)
        self.validation_columns = validation_columns(val_metrics)
        self.tensorboard = tensorboard
        self.write, self.reduce, self.extra = write, reduce, dict(extra or {})
        self._pending: list[tuple[int, dict[str, torch.Tensor]]] = []
        self._epoch_sums: dict[str, float] = {}
        self._epoch_counts: dict[str, int] = {}

    def add(self, step: int, stats: dict[str, torch.Tensor]) -> None:
        self._pending.append((step, stats))

    def flush(self, epoch: int, extra: dict[str, float]) -> dict[str, float] | None:
        """Write the row for the steps added since the last flush (None if none):
        the mean of each value over the steps that logged it. Raises
        NonFiniteLoss, naming the first step whose loss is not finite."""
        if not self._pending:
            return None
        keys = [(step, name) for step, stats in self._pending for name in stats]
        flat = torch.stack([stats[name].float() for _, stats in self._pending for name in stats])
        values = self.reduce(flat).cpu().tolist()  # the one sync (and, with ranks, the one collective)
        pending, last_step = self._pending, self._pending[-1][0]
        self._pending = []
        check_finite_steps(pending, keys, values)
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for (_, name), value in zip(keys, values, strict=True):
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
        for name in sums:
            self._epoch_sums[name] = self._epoch_sums.get(name, 0.0) + sums[name]
            self._epoch_counts[name] = self._epoch_counts.get(name, 0) + counts[name]
        row = {"epoch": epoch, "step": last_step, **{n: sums[n] / counts[n] for n in sums}, **extra, **self.extra}
        if self.write:
            append_line(self.jsonl_path, json.dumps(row))
        if self.tensorboard:
            self.tensorboard.scalars("train", row, last_step)
        return row

    def end_epoch(
        self, epoch: int, step: int, extra: dict[str, float | None], finished: bool = True
    ) -> dict[str, float | None]:
        """Write epochs.csv's row: the epoch's means of the logged values, plus
        `extra`. An unfinished epoch (the run ends inside it) keeps its sums,
        which the checkpoint saves: resumed, its row is written again whole.
        The epoch's steps must all be flushed into rows first."""
        assert not self._pending, "flush before the epoch's row"
        means = {name: total / self._epoch_counts[name] for name, total in self._epoch_sums.items()}
        if finished:
            self._epoch_sums, self._epoch_counts = {}, {}
        row = {"epoch": epoch, "step": step, **means, **extra}
        if self.write:
            _append_csv(self.csv_path, self.epoch_columns, row)
        return row

    def validation(self, row: dict[str, float]) -> None:
        if self.write:
            _append_csv(self.validation_path, self.validation_columns, row)
        if self.tensorboard:
            scores = {k: v for k, v in row.items() if k not in ("epoch", "step") and not k.startswith("bicubic_")}
            self.tensorboard.scalars("val", scores, int(row["step"]))

    # What a checkpoint keeps so that a resumed epoch's means cover the whole epoch.
    def state(self) -> dict:
        assert not self._pending, "flush before saving"
        return {"sums": dict(self._epoch_sums), "counts": dict(self._epoch_counts)}

    def resume(self, state: dict, step: int, keep_epochs_before: int, validated: bool) -> None:
        """Continue the files of a run from its checkpoint at `step`. It drops
        the rows written after it (by a run that died before its next
        checkpoint), epochs.csv's rows from epoch `keep_epochs_before` on (the
        run writes them again whole), and the validation row of `step` itself
        unless the checkpoint records it as done. Raises SrganError for a
        damaged log, naming the file and the line."""
        self._epoch_sums = dict(state.get("sums", {}))
        self._epoch_counts = dict(state.get("counts", {}))
        if not self.write:
            return
        # Read all three (and find any damage) before rewriting any.
        rows = read_jsonl(self.jsonl_path) if self.jsonl_path.exists() else None
        epochs = read_epochs_csv(self.csv_path) if self.csv_path.exists() else None
        validations = read_validation_csv(self.validation_path) if self.validation_path.exists() else None
        if rows is not None:
            kept = [row for row in rows if row["step"] <= step]
            write_text(self.jsonl_path, "".join(json.dumps(row) + "\n" for row in kept), overwrite=True)
        if epochs is not None:
            _write_csv(  # in this run's columns, as validation.csv below
                self.csv_path,
                self.epoch_columns,
                [row for row in epochs if int(row["epoch"]) < keep_epochs_before and int(row["step"]) <= step],
            )
        if validations is not None:
            # in this run's columns: a resume that changed train.val_metrics leaves the old rows' others empty
            _write_csv(
                self.validation_path,
                self.validation_columns,
                [row for row in validations if int(row["step"]) < step or (validated and int(row["step"]) == step)],
            )


def check_finite_steps(pending: list, keys: list[tuple[int, str]], values: list[float]) -> None:
    """Raise NonFiniteLoss at the first step with a loss that is not finite, naming its terms."""
    by_step: dict[int, dict[str, float]] = {}
    for (step, name), value in zip(keys, values, strict=True):
        by_step.setdefault(step, {})[name] = value
    for step, row in by_step.items():
        # A gradient norm may be inf where fp16's scaler skips the step: no reason to stop.
        if all(math.isfinite(v) for name, v in row.items() if name not in GRADIENT_NORMS):
            continue
        losses = [name for name in ("g_loss", "d_loss", *row) if name in row and name not in GRADIENT_NORMS]
        worst = next(name for name in losses if not math.isfinite(row[name]))
        terms = ", ".join(f"{name} {row[name]:.4g}" for name in ("d_loss", "g_loss", *LOSS_TERMS) if name in row)
        raise NonFiniteLoss(
            f"step {step}: {worst} is {row[worst]} ({terms}); stopping, the last checkpoint "
            "is kept (a lower learning rate or loss weight may help)"
        )


# ---- reading the files back -------------------------------------------------


def read_jsonl(path: Path) -> list[dict]:
    """The rows of metrics.jsonl. Drops a torn last line (a kill or a full
    disk mid-append) with a warning; raises SrganError, naming the file and
    the line, for any other bad line."""
    text = read_regular_text(path, MAX_LOG_BYTES, "log")
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = parse_json(line)
            if not isinstance(row, dict) or isinstance(row.get("step"), bool) or not isinstance(row.get("step"), int):
                raise ValueError("not a row with an integer step")
        except ValueError as error:
            _torn_or_damaged(path, number, number == len(lines) and not text.endswith("\n"), "a metrics row", error)
            continue
        rows.append(row)
    return rows


def read_csv(path: Path, columns: tuple[str, ...]) -> list[dict]:
    """The rows of epochs.csv or validation.csv, with the checks of read_jsonl:
    the header must be `columns`, epoch and step integers, the other fields
    numbers or empty (SrganError, naming the file and the line, otherwise)."""
    text = read_regular_text(path, MAX_LOG_BYTES, "log")
    lines = text.splitlines(keepends=True)
    if not lines:
        return []
    header = next(csv.reader([lines[0]]))
    if tuple(header) != columns:
        raise SrganError(f"{path}: line 1: expected the columns {','.join(columns)}; the file is damaged")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            fields = next(csv.reader([line]))
            if len(fields) != len(columns) or not line.endswith("\n"):
                raise ValueError(f"{len(fields)} fields, expected {len(columns)}")
            row = dict(zip(columns, fields, strict=True))
            int(row["epoch"]), int(row["step"])
            for value in fields:
                if value:
                    float(value)
        except (ValueError, StopIteration, csv.Error) as error:
            _torn_or_damaged(
                path, number, number == len(lines) and not line.endswith("\n"), f"a row of {path.name}", error
            )
            continue
        rows.append(row)
    return rows


def read_run_logs(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """metrics.jsonl's rows and validation.csv's rows of a run (empty when absent)."""
    metrics, validation = run_dir / "metrics.jsonl", run_dir / "validation.csv"
    return (
        read_jsonl(metrics) if metrics.exists() else [],
        read_validation_csv(validation) if validation.exists() else [],
    )


def read_validation_csv(path: Path) -> list[dict]:
    """validation.csv's rows, in whichever columns train.val_metrics gave it
    (validation_columns); an optional metric it lacks reads as empty."""
    return _read_with_optional_metrics(path, validation_columns)


def read_epochs_csv(path: Path) -> list[dict]:
    """epochs.csv's rows, in whichever columns train.val_metrics gave it
    (epoch_columns); an optional metric it lacks reads as empty."""
    return _read_with_optional_metrics(path, epoch_columns)


def _read_with_optional_metrics(path: Path, columns: Callable[[Sequence[str]], tuple[str, ...]]) -> list[dict]:
    first = read_regular_text(path, MAX_LOG_BYTES, "log").split("\n", 1)[0]
    header = next(csv.reader([first]), [])
    chosen = [name for name in OPTIONAL_METRICS if name in header]
    rows = read_csv(path, columns(chosen))  # refuses any other header, naming the file
    return [{**{column: "" for column in columns(OPTIONAL_METRICS)}, **row} for row in rows]


def is_number(value) -> bool:
    """A logged value that is a number (JSON's true and false are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _torn_or_damaged(path: Path, number: int, torn: bool, what: str, error: Exception) -> None:
    """A line that does not parse: dropped with a warning when it is the torn
    last line an interrupted append leaves, else the file is damaged."""
    if torn:
        log.warning("%s: line %d is cut short (an interrupted write); ignoring it", path, number)
        return
    raise SrganError(f"{path}: line {number} is not {what} ({error}); the file is damaged: remove that line to go on")


# ---- writing ----------------------------------------------------------------


def append_line(path: Path, line: str) -> None:
    """Append one line; a full disk becomes DiskFull (the torn line it may
    leave is dropped when the file is read back)."""
    try:
        with open(path, "a", encoding="utf-8", newline="") as f:
            f.write(line + "\n")
    except OSError as error:
        if error.errno in FULL_DISK_ERRNOS:
            raise DiskFull(f"disk full at {path} ({error.strerror})") from None
        raise


def _append_csv(path: Path, columns: tuple[str, ...], row: dict) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    if not path.exists():
        writer.writeheader()
    writer.writerow({k: _format(row.get(k)) for k in columns})
    append_line(path, out.getvalue()[:-1])


def _write_csv(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text(path, out.getvalue(), overwrite=True)


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


class QuietFileHandler(logging.FileHandler):
    """train.log: a failed write (a full disk) is not worth a traceback on
    stderr; the write that matters (a checkpoint, a log row) reports it."""

    srgan_run_log = False  # True for the run's train.log (see detach_log_file)

    def handleError(self, record: logging.LogRecord) -> None:
        pass


# ---- TensorBoard --------------------------------------------------------------


class TensorBoard:
    """Scalars and images for TensorBoard, when it is installed."""

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter  # ImportError without tensorboard

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def scalars(self, group: str, row: dict, step: int) -> None:
        for name, value in row.items():
            if name not in ("epoch", "step") and isinstance(value, (int, float)):
                self.writer.add_scalar(f"{group}/{name}", value, step)
        self.writer.flush()

    def image(self, name: str, image: np.ndarray, step: int) -> None:
        self.writer.add_image(name, image, step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_tensorboard(run_dir: Path) -> TensorBoard | None:
    """The run's TensorBoard writer, or None, with a warning, when tensorboard is not installed."""
    try:
        return TensorBoard(run_dir)
    except ImportError:
        log.warning("train.tensorboard: tensorboard is not installed (pip install tensorboard); writing no events")
        return None
