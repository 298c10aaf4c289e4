"""What a run writes as it goes: metrics.jsonl (a row per `log_every` steps,
the means over those steps) and epochs.csv (a row per epoch). Step values
stay on the device until a row is due: one host sync per row, none per step."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import torch

from srgan.configs.errors import SrganError

LOSS_TERMS = ("image", "adversarial", "perceptual", "tv")
EPOCH_COLUMNS = ("epoch", "step", "d_loss", "g_loss", "d_score", "g_score", *LOSS_TERMS, "psnr", "ssim", "seconds")


class NonFiniteLoss(SrganError):
    """A loss became inf or NaN; the run stops before it writes a checkpoint."""


class MetricLog:
    def __init__(self, run_dir: Path):
        self.jsonl_path = run_dir / "metrics.jsonl"
        self.csv_path = run_dir / "epochs.csv"
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
        return row

    def end_epoch(self, epoch: int, step: int, extra: dict[str, float]) -> dict[str, float]:
        """Write epochs.csv's row: the epoch's means of the logged values, plus `extra`."""
        means = {name: total / self._epoch_counts[name] for name, total in self._epoch_sums.items()}
        self._epoch_sums, self._epoch_counts = {}, {}
        row = {"epoch": epoch, "step": step, **means, **extra}
        new_file = not self.csv_path.exists()
        with open(self.csv_path, "a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=EPOCH_COLUMNS, extrasaction="ignore")
            if new_file:
                writer.writeheader()
            writer.writerow({k: _format(row.get(k)) for k in EPOCH_COLUMNS})
        return row


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
