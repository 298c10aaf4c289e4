"""The metrics by name: which are lower-is-better, the names a user may
choose, and ImageScores, which computes the chosen ones (PSNR and SSIM in
psnr_ssim.py, LPIPS and DISTS in learned.py, the colour drift in colour.py)
for an SR image and its HR."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from srgan.configs.schema import METRIC_NAMES
from srgan.files.errors import SrganError
from srgan.metrics.colour import DRIFT_COLUMNS, colour_drift
from srgan.metrics.learned import BACKBONES, LearnedMetric
from srgan.metrics.psnr_ssim import psnr_y, ssim_y

# the learned distances and the colour difference; PSNR and SSIM: higher is better
LOWER_IS_BETTER = frozenset({*BACKBONES, "ciede2000", "ciede2000_p99"})


def metric_columns(names: Sequence[str]) -> tuple[str, ...]:
    """The scores the metrics `names` give, in order: one each, but four for
    ciede2000 (its mean, 99th percentile and the a*, b* shifts)."""
    return tuple(column for name in names for column in (DRIFT_COLUMNS if name == "ciede2000" else (name,)))


def worst_score(metric: str) -> float:
    """What any first score beats: the start of a best-so-far."""
    return math.inf if metric in LOWER_IS_BETTER else -math.inf


def better(metric: str, value: float, best: float) -> bool:
    """Whether `value` beats `best` for `metric` (lower is better for the learned ones and ciede2000)."""
    return value < best if metric in LOWER_IS_BETTER else value > best


def parse_metric_names(text: str, key: str) -> list[str]:
    """`psnr,ssim,lpips` -> the names, in the order given; SrganError naming
    `key` for an unknown name or an empty list."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in METRIC_NAMES]
    if unknown or not names:
        raise SrganError(
            f"{key}: unknown metric {', '.join(unknown) or repr(text)}; expected some of {', '.join(METRIC_NAMES)}"
        )
    return list(dict.fromkeys(names))


class ImageScores:
    """The chosen metrics of an SR image against its HR, by name. The learned
    ones load their networks here, before any work (SrganError naming the
    missing file); `key` names the option that chose them."""

    def __init__(self, names: Sequence[str], device: torch.device, key: str):
        self.names = tuple(names)
        self.columns = metric_columns(self.names)  # the keys of each call's scores, in order
        self.learned = {name: LearnedMetric(name, device, key) for name in self.names if name in BACKBONES}
        # what a report of these scores must say: backbone files that are not torchvision's
        self.warnings = [metric.warning for metric in self.learned.values() if metric.warning]

    def __call__(self, sr8: torch.Tensor, hr8: torch.Tensor, border: int) -> dict[str, float]:
        """Two 3xHxW uint8 images -> the scores by column (`columns`):
        PSNR/SSIM on Y and the colour drift in CIELAB with `border` px shaved,
        the learned ones on RGB, whole."""
        scores = {}
        for name in self.names:
            if name == "psnr":
                scores[name] = psnr_y(sr8, hr8, border)
            elif name == "ssim":
                scores[name] = ssim_y(sr8, hr8, border)
            elif name == "ciede2000":
                scores.update(colour_drift(sr8, hr8, border))
            else:
                scores[name] = self.learned[name].distance(sr8, hr8)
        return scores
