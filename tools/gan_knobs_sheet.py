"""`python tools/gan_knobs_sheet.py --out docs --runs /tmp/sheet-runs`: the
sheet of README's "When the GAN hurts the picture" (docs/gan-knobs.png).

Three short trainings from the `demo` preset, identical but for one knob
(same seed, deterministic, fp32): the base GAN, the base with LDL, the base
with the colour loss. Then one photo no run trained on, upscaled by each
run's last generator and by blends of the base run's two ends
(checkpoints/pretrained.pt, saved as the PSNR phase ends, and its final
model) at alpha 0, 0.5 and 1; a crop of it, one panel a model with its
PSNR and CIEDE2000, scored by `srgan evaluate`; and the numbers as a
markdown table on stdout (docs/interpolate.md "The GAN knobs, measured").

Everything goes through the `srgan` CLI, as a user would type it; the
only Python of srgan's own used here is the bicubic downscale (the LR every
srgan command makes from an HR photo) and upscale (the bicubic panel). It
takes about 11 minutes on 2 CPU cores (3 x 3.5 minutes of training; with
--skip-training, the sheet alone, one). A developer's tool, run from the
checkout; it writes the sheet in --out and everything else in --runs."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from srgan.data.datasets import bicubic_downscale
from srgan.inference.compare import bicubic_upscale

SHEET = "gan-knobs.png"
SCALE = 4  # the demo preset's
METRICS = "psnr,ssim,ciede2000"

# The demo preset's GAN phase is 100 steps at a tenth of the rates with the
# paper's weights (adversarial 1e-3, perceptual 6e-3): too short and too weak
# to change the picture (a probe: 0.08 dB in 200 steps at 10x adversarial).
# Here it runs 300 steps (a 1200-step trial had moved the validation PSNR
# most, -0.8 dB, by step 900) after the same 600 PSNR steps, D's rate 10x (1e-4
# in the GAN phase, ESRGAN's) and the adversarial term 50x, so that it
# pulls harder than the L1 (0.05 x ~0.7 against ~0.023). The perceptual
# weight is 1.0, but offline VGG has random weights and its relu2_2 MSE is
# ~2e-5: it adds next to nothing. EMA 0.99 in every run: LDL needs an EMA,
# and 0.999 (no warm-up) would still hold over half of the untrained start
# at step 600. fp32 fixed: precision auto may pick bf16 on AVX512-BF16.
BASE = [
    "train.precision=fp32",
    "train.max_steps=900",
    "train.epochs=9",
    "train.lr_d=1e-3",
    "train.ema_decay=0.99",
    "loss.weights.adversarial=0.05",
    "loss.weights.perceptual=1.0",
    "train.val_metrics=[psnr,ssim,ciede2000]",
]
RUNS = {  # run name -> what it adds to BASE
    "base": [],
    "ldl": ["loss.weights.ldl=1.0"],  # the ESRGAN and Real-ESRGAN presets' weight
    "colour": ["loss.weights.colour=1.0"],  # chroma only; luma stays 0: Y is left to the GAN, as in the base
}
ALPHAS = (0.0, 0.5, 1.0)  # pretrained.pt (the PSNR end) -> the base run's final generator
NOTES = {"alpha 0": " (pretrained.pt, PSNR end)", "alpha 1": " (= base GAN)"}  # after a panel's name


def srgan(*args: str) -> str:
    """Run `srgan ARGS` (the checkout's, as installed in this Python) on one
    thread; its stdout. Stops on a failure. One thread: on two cores shared
    with other work, torch's two threads wait for each other at every
    barrier, and an epoch took 2 to 6 times as long as on one thread;
    the sheet's numbers are one thread's (two may round differently)."""
    command = [sys.executable, "-m", "srgan.cli", *args]
    print("+ srgan", " ".join(args), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        sys.exit(f"srgan {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def train(runs: Path) -> None:
    for name, extra in RUNS.items():
        started = time.monotonic()
        sets = [f"train.run_dir={runs / name}", *BASE, *extra]
        srgan("train", "--config", "demo", *[arg for key in sets for arg in ("--set", key)])
        print(f"  {name}: {time.monotonic() - started:.0f} s", flush=True)


def photo_crop(photo: Path, box: tuple[int, int, int], runs: Path) -> Path:
    """The HR crop (x, y, side; side a multiple of SCALE) as a PNG: the image every model is scored on."""
    x, y, side = box
    hr = np.asarray(Image.open(photo).convert("RGB"))
    if side % SCALE or y + side > hr.shape[0] or x + side > hr.shape[1]:
        sys.exit(f"--crop {x},{y},{side}: must lie in {photo} ({hr.shape[1]}x{hr.shape[0]}), side a multiple of 4")
    path = runs / "crop" / "hr.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(hr[y : y + side, x : x + side]).save(path)
    return path


def models(runs: Path) -> dict[str, list[str]]:
    """Panel label -> the generator options of `srgan upscale` and `srgan evaluate`."""
    base, pretrained = runs / "base", runs / "base" / "checkpoints" / "pretrained.pt"
    panels = {"base GAN": ["-k", str(base)], "+LDL": ["-k", str(runs / "ldl")], "+colour": ["-k", str(runs / "colour")]}
    for alpha in ALPHAS:
        panels[f"alpha {alpha:g}"] = ["-k", str(pretrained), "--blend", str(base), "--blend-alpha", f"{alpha:g}"]
    return panels


def score_and_render(hr_path: Path, photo: Path, runs: Path) -> dict[str, dict]:
    """Each model's SR of the crop (a PNG under runs/crop) and its scores on the crop and on the whole photo."""
    lr_path = hr_path.with_name("lr.png")
    Image.fromarray(bicubic_downscale(np.asarray(Image.open(hr_path)), SCALE)).save(lr_path)
    results: dict[str, dict] = {"bicubic": {}}  # bicubic's scores come with every model's: kept from the first
    for index, (label, options) in enumerate(models(runs).items()):
        json_path = runs / "crop" / f"scores{index}.json"
        srgan("evaluate", str(hr_path), str(photo), *options, "--metrics", METRICS, "--json", str(json_path), "--force")
        scores = json.loads(json_path.read_text())["images"]  # the crop first, then the whole photo
        sr_path = runs / "crop" / f"sr{index}.png"
        srgan("upscale", str(lr_path), *options, "-o", str(sr_path), "--precision", "fp32", "--tile", "0", "--force")
        results[label] = {"sr": sr_path, "crop": scores[0]["sr"], "photo": scores[1]["sr"]}
        results["bicubic"] = results["bicubic"] or {"crop": scores[0]["bicubic"], "photo": scores[1]["bicubic"]}
    return results


def compose(hr_path: Path, results: dict[str, dict], out: Path, zoom: int) -> None:
    """One PNG: bicubic, base GAN, +LDL, +colour / alpha 0, 0.5, 1, HR; each panel its crop, name and scores."""
    hr = Image.open(hr_path).convert("RGB")
    lr = np.asarray(Image.open(hr_path.with_name("lr.png")))
    pictures = {"bicubic": Image.fromarray(bicubic_upscale(lr, SCALE))}
    pictures |= {label: Image.open(r["sr"]).convert("RGB") for label, r in results.items() if "sr" in r}
    pictures["HR"] = hr
    order = ["bicubic", "base GAN", "+LDL", "+colour", "alpha 0", "alpha 0.5", "alpha 1", "HR"]
    side, caption, columns = hr.width * zoom, 44, 4
    font = ImageFont.load_default(size=15)
    sheet = Image.new("RGB", (columns * side, 2 * (side + caption)), "white")
    draw = ImageDraw.Draw(sheet)
    for i, label in enumerate(order):
        left, top = (i % columns) * side, (i // columns) * (side + caption)
        sheet.paste(pictures[label].resize((side, side), Image.Resampling.NEAREST), (left, top))
        if label == "HR":
            text = "HR: what each panel is scored against"
        else:
            s = results[label]["crop"]
            text = f"{label}{NOTES.get(label, '')}\nPSNR {s['psnr']:.2f} dB  CIEDE2000 {s['ciede2000']:.2f}"
        draw.multiline_text((left + 6, top + side + 3), text, fill="black", font=font, spacing=3)
    sheet.save(out, optimize=True)


def table(results: dict[str, dict]) -> str:
    """Markdown: per panel, the crop's and the whole photo's PSNR (Y, shaved), SSIM, CIEDE2000 mean/p99, a*/b*."""
    rows = ["| panel | where | PSNR dB | SSIM | CIEDE2000 mean | p99 | a* shift | b* shift |", "|---" * 8 + "|"]
    for label, r in results.items():
        for where in ("crop", "photo"):
            s = r[where]
            rows.append(
                f"| {label} | {where} | {s['psnr']:.2f} | {s['ssim']:.4f} | {s['ciede2000']:.2f} | "
                f"{s['ciede2000_p99']:.2f} | {s['shift_a']:+.2f} | {s['shift_b']:+.2f} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=f"Draw {SHEET}: three demo runs (base GAN, +LDL, +colour) and the base's alphas 0, 0.5, 1 "
        "on one photo, scored by srgan evaluate."
    )
    parser.add_argument("--out", type=Path, required=True, help=f"folder for {SHEET} (docs/)")
    parser.add_argument("--runs", type=Path, required=True, help="folder for the run folders and the crops")
    parser.add_argument("--photo", type=Path, help="HR photo (default: the built-in val photo, immunohistochemistry)")
    parser.add_argument(
        "--crop",
        default="232,296,128",
        help="x,y,side of the region shown and scored (default: immunohistochemistry's "
        "small gland: brown membranes, blue nuclei, white stroma)",
    )
    parser.add_argument("--zoom", type=int, default=2, help="each crop pixel drawn as ZOOMxZOOM (nearest)")
    parser.add_argument("--skip-training", action="store_true", help="reuse the runs already in --runs")
    parser.add_argument("--force", action="store_true", help="overwrite the sheet and the run folders")
    args = parser.parse_args()

    sheet = args.out / SHEET
    if sheet.exists() and not args.force:
        sys.exit(f"{sheet} exists (--force to overwrite)")
    if not args.skip_training:
        for name in RUNS:
            if (args.runs / name).exists():
                if not args.force:
                    sys.exit(f"{args.runs / name} exists (--force to delete it and train again)")
                shutil.rmtree(args.runs / name)
        args.runs.mkdir(parents=True, exist_ok=True)
        train(args.runs)
    photo = args.photo
    if photo is None:
        srgan("samples", str(args.runs / "photos"), "--force")
        photo = args.runs / "photos" / "val" / "immunohistochemistry.png"
    x, y, side = (int(v) for v in args.crop.split(","))
    hr_path = photo_crop(photo, (x, y, side), args.runs)
    results = score_and_render(hr_path, photo, args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    compose(hr_path, results, sheet, args.zoom)
    print(f"wrote {sheet}; {photo.name}, crop {side}x{side} at ({x}, {y}); scores by srgan evaluate ({METRICS})")
    print(table(results))


if __name__ == "__main__":
    main()
