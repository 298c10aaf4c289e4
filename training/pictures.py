"""The pictures a run draws as it goes: samples/epoch_NNN.png (bicubic | SR
| HR for a fixed few validation crops) and curves.png."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from srgan.data import ValImages, to_tensor
from srgan.data.datasets import low_resolution
from srgan.data.degradations import named_generator
from srgan.data.paired import PairedValImages, aligned_centre_crop
from srgan.data.sheets import GAP, side_by_side
from srgan.files import check_output, write_file
from srgan.inference.imageio import write_png
from srgan.metrics import quantize
from srgan.models import Runtime
from srgan.training.logs import is_number, read_run_logs
from srgan.training.validation import bicubic_upscale

SAMPLE_COUNT = 4
VALIDATION_TITLES = {
    "psnr": "validation PSNR (dB, Y channel)",
    "ssim": "validation SSIM (Y channel)",
    "lpips": "validation LPIPS (AlexNet; lower is better)",
    "lpips_vgg": "validation LPIPS (VGG; lower is better)",
    "dists": "validation DISTS (lower is better)",
    "ciede2000": "validation mean CIEDE2000 (colour difference; lower is better)",
}
SAMPLE_LR_SIDE = 32  # LR pixels a side of each sample crop


class SampleSheet:
    """Fixed crops from the first validation images, drawn each epoch."""

    def __init__(self, images: ValImages):
        self.scale = images.scale
        self.crops: list[tuple[torch.Tensor, np.ndarray]] = []
        side = SAMPLE_LR_SIDE * images.scale
        for i in range(min(SAMPLE_COUNT, len(images))):
            _, lr, hr = images[i]
            if isinstance(images, PairedValImages):  # the given LR, centre crops aligned
                lr8, hr8 = (quantize(t).permute(1, 2, 0).numpy() for t in (lr, hr))
                lr_crop, hr_crop = aligned_centre_crop(lr8, hr8, self.scale, side)
                self.crops.append((to_tensor(lr_crop), np.ascontiguousarray(hr_crop)))
                continue
            hr8 = quantize(hr).permute(1, 2, 0).numpy()
            h, w = hr8.shape[:2]
            c = min(side, h - h % self.scale, w - w % self.scale)
            top, left = (h - c) // 2, (w - c) // 2
            crop = np.ascontiguousarray(hr8[top : top + c, left : left + c])
            lr = low_resolution(crop, self.scale, images.degradation, named_generator(images.seed, f"sample {i}"))
            self.crops.append((lr, crop))

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


def draw_curves(
    runs: list[Path],
    out: Path,
    overwrite: bool = True,
    labels: list[str] | None = None,
    psnr_only: bool = False,
    series: list[tuple[list[dict], list[dict]]] | None = None,
    metric: str = "psnr",
) -> Path:
    """Validation PSNR, g_loss, d_loss, d_score = D(x) and g_score = D(G(z))
    against step, one colour a run, from the runs' files (curves.png of a
    run, `srgan plot` of several); `psnr_only`: the PSNR panel alone, larger,
    for comparing learning curves; `series`: the runs' read_run_logs, when
    the caller has read them; `metric`: the validation metric of the first
    panel (lpips, dists... from validation.csv). Raises ImportError without matplotlib."""
    import matplotlib  # optional: only the curves need it, the run goes on without

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out = Path(out)
    check_output(out, overwrite)  # refuse the target before the drawing, not after
    labels = labels or [run.name for run in runs]
    series = series if series is not None else [read_run_logs(run) for run in runs]
    if psnr_only:
        fig, psnr_axes = plt.subplots(1, 2, figsize=(13, 5.5), constrained_layout=True, width_ratios=(3, 1))
        panels = {"val": (psnr_axes[0], VALIDATION_TITLES[metric])}
        legend = psnr_axes[1]
    else:
        fig, axes = plt.subplots(2, 3, figsize=(16, 8.5), constrained_layout=True)
        panels = {
            "val": (axes[0, 0], VALIDATION_TITLES[metric]),
            "g_loss": (axes[0, 1], "g_loss (log scale)"),
            "d_loss": (axes[0, 2], "d_loss"),
            "d_score": (axes[1, 0], "d_score = D(x)"),
            "g_score": (axes[1, 1], "g_score = D(G(z))"),
        }
        legend = axes[1, 2]
    tab10 = plt.get_cmap("tab10")
    colours = [tab10(i) for i in range(tab10.N)]  # its 10 colours (an int indexes them)
    dashes = ("-", "--", ":", "-.")  # runs that coincide stay visible
    bicubic_drawn: set[float] = set()
    for i, (label, (rows, validation)) in enumerate(zip(labels, series, strict=True)):
        style = {
            "color": colours[i % len(colours)],
            "linestyle": dashes[i % len(dashes)],
            "linewidth": 1.4,
            "label": label,
        }
        for name in ("g_loss", "d_loss", "d_score", "g_score") if not psnr_only else ():
            points = [(r["step"], r[name]) for r in rows if is_number(r.get(name))]
            if points:
                panels[name][0].plot(*zip(*points, strict=True), **style)
        scored = [v for v in validation if v.get(metric) and v.get(f"bicubic_{metric}")]
        if scored:
            ax = panels["val"][0]
            ax.plot(
                [int(v["step"]) for v in scored], [float(v[metric]) for v in scored], marker="o", markersize=3, **style
            )
            bicubic = round(float(scored[0][f"bicubic_{metric}"]), 2 if metric == "psnr" else 4)
            if bicubic not in bicubic_drawn:
                ax.axhline(bicubic, color="gray", linestyle="--", linewidth=1)
                ax.annotate(
                    f"bicubic {bicubic:.2f}" if metric == "psnr" else f"bicubic {bicubic:.4f}",
                    (0, bicubic),
                    xycoords=("axes fraction", "data"),
                    xytext=(4, 3),
                    textcoords="offset points",
                    color="gray",
                    fontsize=8,
                )
                bicubic_drawn.add(bicubic)
    if not psnr_only:
        panels["g_loss"][0].set_yscale("log") if any(panels["g_loss"][0].lines) else None
        for name in ("d_score", "g_score"):
            panels[name][0].set_ylim(0, 1)
    for ax, title in panels.values():
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    legend.axis("off")
    handles, names = [], []
    for ax, _ in panels.values():
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            if name not in names:
                handles.append(handle)
                names.append(name)
    if handles:
        legend.legend(handles, names, loc="upper left", frameon=False, fontsize=9, title="run")
    try:
        write_file(out, lambda f: fig.savefig(f, format="png", dpi=80), overwrite=overwrite)
    finally:
        plt.close(fig)
    return out
