"""The pictures a run draws as it goes: samples/epoch_NNN.png (bicubic | SR
| HR for a fixed few validation crops) and curves.png."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from srgan.data import ValImages, bicubic_downscale, to_tensor
from srgan.inference.compare import GAP, side_by_side
from srgan.inference.metrics import quantize
from srgan.files import check_output, write_file
from srgan.inference.imageio import write_png
from srgan.models import Runtime
from srgan.training.logs import VALIDATION_COLUMNS, read_csv, read_jsonl
from srgan.training.validation import bicubic_upscale

SAMPLE_COUNT = 4
SAMPLE_LR_SIDE = 32  # LR pixels a side of each sample crop


class SampleSheet:
    """Fixed crops from the first validation images, drawn each epoch."""

    def __init__(self, images: ValImages):
        self.scale = images.scale
        self.crops: list[tuple[torch.Tensor, np.ndarray]] = []
        side = SAMPLE_LR_SIDE * images.scale
        for i in range(min(SAMPLE_COUNT, len(images))):
            _, _, hr = images[i]
            hr8 = quantize(hr).permute(1, 2, 0).numpy()
            h, w = hr8.shape[:2]
            c = min(side, h - h % self.scale, w - w % self.scale)
            top, left = (h - c) // 2, (w - c) // 2
            crop = np.ascontiguousarray(hr8[top : top + c, left : left + c])
            self.crops.append((to_tensor(bicubic_downscale(crop, self.scale)), crop))

    @torch.inference_mode()
    def draw(self, generator: torch.nn.Module, runtime: Runtime) -> np.ndarray:
        """An HxWx3 uint8 sheet: one row per crop, bicubic | SR | HR."""
        was_training = generator.training
        generator.eval()
        rows = []
        for lr, hr in self.crops:
            with runtime.autocast():
                sr = generator(runtime.tensor(lr[None]))[0]
            sr8 = quantize(sr.float().cpu()).permute(1, 2, 0).numpy()
            bicubic = bicubic_upscale(lr, self.scale).permute(1, 2, 0).numpy()
            rows.append(side_by_side([bicubic, sr8, hr]))
        generator.train(was_training)
        width = max(r.shape[1] for r in rows)
        padded = [np.pad(r, ((0, GAP), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
        return np.concatenate(padded, axis=0)[:-GAP]

    def write(self, generator: torch.nn.Module, runtime: Runtime, path: Path) -> np.ndarray:
        sheet = self.draw(generator, runtime)
        write_png(sheet, path, overwrite=True)  # the run's own picture
        return sheet


def draw_curves(run_dir: Path, out: Path | None = None, overwrite: bool = True) -> Path:
    """d_loss, g_loss, d_score, g_score and validation PSNR against step, from
    the run's files, into `out` (default: the run's curves.png, its own
    picture, redrawn). Raises ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out or run_dir / "curves.png")
    check_output(out, overwrite)  # before the drawing
    metrics, validation_csv = run_dir / "metrics.jsonl", run_dir / "validation.csv"
    rows = read_jsonl(metrics) if metrics.exists() else []
    validation = read_csv(validation_csv, VALIDATION_COLUMNS) if validation_csv.exists() else []

    def series(name: str) -> tuple[list[int], list[float]]:
        points = [(r["step"], r[name]) for r in rows
                  if isinstance(r.get(name), (int, float)) and not isinstance(r.get(name), bool)]
        return [p[0] for p in points], [p[1] for p in points]

    fig, axes = plt.subplots(1, 3, figsize=(15, 4), constrained_layout=True)
    for name in ("d_loss", "g_loss"):
        axes[0].plot(*series(name), label=name)
    axes[0].set_title("losses")
    axes[0].set_yscale("log")
    for name in ("d_score", "g_score"):
        axes[1].plot(*series(name), label=name)
    axes[1].set_title("D(x) and D(G(z))")
    axes[1].set_ylim(0, 1)
    validation = [v for v in validation if v["psnr"] and v["bicubic_psnr"]]
    if validation:
        steps = [int(v["step"]) for v in validation]
        axes[2].plot(steps, [float(v["psnr"]) for v in validation], marker="o", label="SR")
        axes[2].axhline(float(validation[0]["bicubic_psnr"]), color="gray", linestyle="--", label="bicubic")
    axes[2].set_title("validation PSNR (dB, Y channel)")
    for ax in axes:
        ax.set_xlabel("step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    try:
        write_file(out, lambda f: fig.savefig(f, format="png", dpi=80), overwrite=overwrite)
    finally:
        plt.close(fig)
    return out
