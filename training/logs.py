"""What a run writes as it goes: metrics.jsonl (a row per `log_every` steps,
the means over those steps), epochs.csv (a row per epoch) and
validation.csv (a row per validation). Step values stay on the device until
a row is due: one host sync per row, none per step."""
from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path

import numpy as np
import torch

from srgan.configs.errors import SrganError

log = logging.getLogger("srgan")

LOSS_TERMS = ("image", "adversarial", "perceptual", "tv")
EPOCH_COLUMNS = ("epoch", "step", "d_loss", "g_loss", "d_score", "g_score", *LOSS_TERMS, "psnr", "ssim", "seconds")
VALIDATION_COLUMNS = ("epoch", "step", "psnr", "ssim", "bicubic_psnr", "bicubic_ssim")


class NonFiniteLoss(SrganError):
    """A loss became inf or NaN; the run stops before it writes a checkpoint."""


class MetricLog:
    def __init__(self, run_dir: Path, tensorboard: "TensorBoard | None" = None):
        self.jsonl_path = run_dir / "metrics.jsonl"
        self.csv_path = run_dir / "epochs.csv"
        self.validation_path = run_dir / "validation.csv"
        self.tensorboard = tensorboard
        self._pending: list[tuple[int, dict[str, torch.Tensor]]] = []
        self._epoch_sums: dict[str, float] = {}
        self._epoch_counts: dict[str, int] = {}

    def add(self, step: int, stats: dict[str, torch.Tensor]) -> None:
        self._pending.append((step, stats))

    def flush(self, epoch: int, extra: dict[str, float]) -> dict[str, float] | None:
        """Write the row for the steps added since the last flush (None if none):
        the mean of each value over the steps that logged it."""
        if not self._pending:
            return None
        keys = [(step, name) for step, stats in self._pending for name in stats]
        flat = torch.stack([stats[name].float() for _, stats in self._pending for name in stats])
        values = flat.cpu().tolist()  # the one sync
        last_step = self._pending[-1][0]
        self._pending.clear()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for (step, name), value in zip(keys, values):
            if not math.isfinite(value):
                what = name if name in ("d_loss", "g_loss") else f"the {name} term of g_loss"
                raise NonFiniteLoss(f"step {step}: {what} is {value}; stopping (the last checkpoint is kept)")
            sums[name] = sums.get(name, 0.0) + value
            counts[name] = counts.get(name, 0) + 1
        for name in sums:
            self._epoch_sums[name] = self._epoch_sums.get(name, 0.0) + sums[name]
            self._epoch_counts[name] = self._epoch_counts.get(name, 0) + counts[name]
        row = {"epoch": epoch, "step": last_step, **{n: sums[n] / counts[n] for n in sums}, **extra}
        with open(self.jsonl_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self.tensorboard:
            self.tensorboard.scalars("train", row, last_step)
        return row

    def end_epoch(self, epoch: int, step: int, extra: dict[str, float], finished: bool = True) -> dict[str, float]:
        """Write epochs.csv's row: the epoch's means of the logged values, plus
        `extra`. An unfinished epoch (the run ends inside it) keeps its sums,
        which the checkpoint saves: resumed, its row is written again whole."""
        means = {name: total / self._epoch_counts[name] for name, total in self._epoch_sums.items()}
        if finished:
            self._epoch_sums, self._epoch_counts = {}, {}
        row = {"epoch": epoch, "step": step, **means, **extra}
        _append_csv(self.csv_path, EPOCH_COLUMNS, row)
        return row

    def validation(self, row: dict[str, float]) -> None:
        _append_csv(self.validation_path, VALIDATION_COLUMNS, row)
        if self.tensorboard:
            self.tensorboard.scalars("val", {k: row[k] for k in ("psnr", "ssim")}, row["step"])

    # What a checkpoint keeps so that a resumed epoch's means cover the whole epoch.
    def state(self) -> dict:
        assert not self._pending, "flush before saving"
        return {"sums": dict(self._epoch_sums), "counts": dict(self._epoch_counts)}

    def resume(self, state: dict, step: int, epoch: int, epoch_finished: bool) -> None:
        """Continue the files of a run from its checkpoint at `step`: rows
        written after it (by a run that died before its next checkpoint) are
        dropped, and an unfinished epoch's row will be written again whole."""
        self._epoch_sums = dict(state.get("sums", {}))
        self._epoch_counts = dict(state.get("counts", {}))
        if self.jsonl_path.exists():
            lines = self.jsonl_path.read_text(encoding="utf-8").splitlines()
            kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
            self.jsonl_path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
        last_epoch_kept = epoch if epoch_finished else epoch - 1
        _filter_csv(self.csv_path, lambda row: int(row["epoch"]) <= last_epoch_kept)
        _filter_csv(self.validation_path, lambda row: int(row["step"]) <= step)


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
    try:
        return TensorBoard(run_dir)
    except ImportError:
        log.warning("train.tensorboard: tensorboard is not installed (pip install tensorboard); writing no events")
        return None


def _append_csv(path: Path, columns: tuple[str, ...], row: dict) -> None:
    new_file = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if new_file:
            writer.writeheader()
        writer.writerow({k: _format(row.get(k)) for k in columns})


def _filter_csv(path: Path, keep) -> None:
    if not path.exists():
        return
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns, rows = reader.fieldnames, [row for row in reader if keep(row)]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
