"""`make gpu-check` (python tools/gpu_check.py): the one script to run
first on a machine with a GPU; it finishes in minutes. It runs the CUDA
tests, a short training and its resume, an upscale, `srgan bench train`
(fp32 deterministic and not, bf16, bf16 + compile), `srgan bench upscale`,
ESRGAN's RRDBNet (a run, its resume, a bf16 upscale, its training step at
the presets' size), whether Real-ESRGAN's degradations keep realesrnet_x4's
step fed, a 1-rank NCCL job under torchrun, and esrgan_x4 at a batch no GPU holds
(the micro-batch planned, then an out-of-memory error forced mid-run), and prints one summary with the
figures docs/performance.md lacks. Without CUDA it skips the CUDA parts,
each with its reason, and still runs the parts that run anywhere (the 1-rank
torchrun job, on gloo). It runs tests/ from the checkout, so it is a
developer's tool outside the installed package."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent  # the checkout (an editable install)
TINY = [
    "model.blocks=2",
    "model.channels=16",
    "model.d_channels=16",
    "data.crop_size=64",
    "data.batch_size=8",
    "data.val=null",
    "data.workers=2",
    "loss.perceptual.weights=none",
    "train.log_every=5",
]


def srgan(*args: str, timeout: int, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "srgan.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def sets(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def last_json(text: str) -> dict:
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def check_cuda_tests(work: Path) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-m",
            "cuda",
            str(ROOT / "tests" / "test_cuda.py"),
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return {"ok": done.returncode == 0, "summary": summary}


def check_train_and_resume(work: Path) -> dict:
    run = work / "run"
    started = time.perf_counter()
    first = srgan(
        "train",
        "--config",
        "demo",
        *sets([*TINY, "train.device=cuda", "train.max_steps=40", "train.pretrain_steps=20", f"train.run_dir={run}"]),
        timeout=240,
    )
    if first.returncode != 0:
        return {"ok": False, "error": first.stderr.strip().splitlines()[-1:]}
    again = srgan("train", "--resume", str(run), "--set", "train.max_steps=60", timeout=240)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {
        "ok": again.returncode == 0 and rows[-1]["step"] == 60,
        "seconds": round(time.perf_counter() - started, 1),
        "images_per_s": rows[-1].get("images_per_s"),
        "error": again.stderr.strip().splitlines()[-1:],
    }


def sample_photo(work: Path) -> Path:
    """scikit-image's astronaut, 512x512, as a PNG in `work` (written once)."""
    import skimage.data
    from PIL import Image

    photo = work / "photo.png"
    if not photo.is_file():
        Image.fromarray(skimage.data.astronaut()).save(photo)
    return photo


def check_upscale(work: Path) -> dict:
    photo = sample_photo(work)
    results = {}
    for precision in ("fp32", "bf16"):
        started = time.perf_counter()
        done = srgan(
            "upscale",
            str(photo),
            "-k",
            str(work / "run"),
            "-o",
            str(work / f"up_{precision}.png"),
            "--device",
            "cuda",
            "--precision",
            precision,
            timeout=180,
        )
        results[precision] = {"ok": done.returncode == 0, "seconds": round(time.perf_counter() - started, 1)}
    return {"ok": all(r["ok"] for r in results.values()), **results}


def check_bench_train(work: Path) -> dict:
    figures = {}
    # fp32 with deterministic=false beside fp32 (deterministic, the default) is
    # what train.deterministic costs on CUDA (cuDNN's autotuner off, cuBLAS's fixed workspace).
    for label, extra in (
        ("fp32", ["train.precision=fp32"]),
        ("fp32 nondeterministic", ["train.precision=fp32", "train.deterministic=false"]),
        ("bf16", ["train.precision=bf16"]),
        ("bf16+compile", ["train.precision=bf16", "train.compile=true"]),
    ):
        done = srgan(
            "bench",
            "train",
            "--set",
            "train.device=cuda",
            "--set",
            "model.blocks=16",
            "--batch",
            "16",
            "--crop",
            "96",
            "--iters",
            "20",
            "--warmup",
            "3",
            "--json",
            *sets(extra),
            timeout=420,
        )
        result = last_json(done.stdout)
        figures[label] = (
            {
                "s_per_step": round(result["median_s_per_step"], 4),
                "images_per_s": round(result["images_per_s"], 1),
                "peak_cuda_mb": result.get("peak_cuda_mb"),
            }
            if result
            else {"error": done.stderr.strip().splitlines()[-1:]}
        )
    return {"ok": all("error" not in f for f in figures.values()), **figures}


def check_bench_upscale(work: Path) -> dict:
    figures = {}
    for precision in ("fp32", "bf16"):
        done = srgan(
            "bench",
            "upscale",
            "--device",
            "cuda",
            "--precision",
            precision,
            "--size",
            "1024x1024",
            "--iters",
            "5",
            "--json",
            timeout=300,
        )
        result = last_json(done.stdout)
        figures[precision] = (
            {
                "output_mp_per_s": round(result["output_mp_per_s"], 2),
                "speedup_over_plain_fp32": round(result["speedup"], 2),
            }
            if result
            else {"error": done.stderr.strip().splitlines()[-1:]}
        )
    return {"ok": all("error" not in f for f in figures.values()), **figures}


def check_rrdb(work: Path) -> dict:
    """ESRGAN's generator (model.arch rrdb) against Real-ESRGAN's U-Net D with
    the relativistic GAN: a short fp16 run on CUDA (AMP, gradient scaler), its
    resume and a tiled bf16 upscale; then esrgan_x4's training step at its
    size (23 blocks x 64 channels, growth 32, 128 px crops, batch 16) with the
    U-Net D in fp32, bf16 and fp16, channels_last."""
    run = work / "rrdb"
    arch = [
        "model.arch=rrdb",
        "model.growth=8",
        "gan.discriminator=unet",
        "gan.d_loss=relativistic",
        "train.precision=fp16",
    ]
    first = srgan(
        "train",
        "--config",
        "demo",
        *sets(
            [*TINY, *arch, "train.device=cuda", "train.max_steps=20", "train.pretrain_steps=10", f"train.run_dir={run}"]
        ),
        timeout=240,
    )
    if first.returncode != 0:
        return {"ok": False, "error": first.stderr.strip().splitlines()[-1:]}
    again = srgan("train", "--resume", str(run), "--set", "train.max_steps=30", timeout=240)
    photo = sample_photo(work)
    up = srgan(
        "upscale",
        str(photo),
        "-k",
        str(run),
        "-o",
        str(work / "up_rrdb.png"),
        "--device",
        "cuda",
        "--precision",
        "bf16",
        "--tile",
        "128",
        timeout=180,
    )
    results: dict[str, Any] = {"resume": again.returncode == 0, "upscale bf16": up.returncode == 0}
    for precision in ("fp32", "bf16", "fp16"):
        done = srgan(
            "bench",
            "train",
            "--config",
            "esrgan_x4",
            "--set",
            "train.device=cuda",
            "--set",
            "gan.discriminator=unet",
            "--set",
            f"train.precision={precision}",
            "--batch",
            "16",
            "--crop",
            "128",
            "--iters",
            "10",
            "--warmup",
            "3",
            "--json",
            timeout=420,
        )
        result = last_json(done.stdout)
        results[f"bench {precision}"] = (
            {
                "s_per_step": round(result["median_s_per_step"], 4),
                "images_per_s": round(result["images_per_s"], 1),
                "peak_cuda_mb": result.get("peak_cuda_mb"),
            }
            if result
            else {"error": done.stderr.strip().splitlines()[-1:]}
        )
    ok = (
        results["resume"]
        and results["upscale bf16"]
        and all("error" not in results[f"bench {p}"] for p in ("fp32", "bf16", "fp16"))
    )
    return {"ok": ok, **results, "error": (again.stderr + up.stderr).strip().splitlines()[-1:] if not ok else []}


def check_degradations(
    work: Path, device: str = "cuda", blocks: int = 23, batch: int = 12, crop: int = 256, iters: int = 10
) -> dict:
    """Whether Real-ESRGAN's degradations keep the GPU fed: realesrnet_x4's
    step on the device in images a second (the same step whatever made the
    LR), against the degraded pairs a second that the preset's 5 workers make
    on this machine's cores, and the same crops made by bicubic."""
    done = srgan(
        "bench",
        "train",
        "--config",
        "realesrnet_x4",
        *sets([f"train.device={device}", f"model.blocks={blocks}"]),
        "--batch",
        str(batch),
        "--crop",
        str(crop),
        "--iters",
        str(iters),
        "--warmup",
        "2",
        "--json",
        timeout=420,
    )
    step = last_json(done.stdout)
    if not step:
        return {"ok": False, "error": done.stderr.strip().splitlines()[-1:]}
    figures: dict[str, Any] = {"step_images_per_s": round(step["images_per_s"], 1)}
    for degradation in ("realesrgan", "bicubic"):
        done = srgan(
            "bench",
            "data",
            "--config",
            "realesrnet_x4",
            *sets(
                [
                    "data.train=builtin:samples",
                    f"data.degradation={degradation}",
                    f"data.crop_size={crop}",
                    f"data.batch_size={batch}",
                ]
            ),
            "--batches",
            str(5 * iters),
            "--json",
            timeout=300,
        )
        data = last_json(done.stdout)
        if not data:
            return {"ok": False, **figures, "error": done.stderr.strip().splitlines()[-1:]}
        figures[f"{degradation}_pairs_per_s"] = data["pairs_per_s"]
    figures["workers"] = data["workers"]
    # above 1: the workers make pairs faster than the step consumes them
    figures["degraded_over_step"] = round(figures["realesrgan_pairs_per_s"] / figures["step_images_per_s"], 2)
    return {"ok": True, **figures}


def check_ddp_one_rank(work: Path) -> dict:
    """torchrun with one rank: NCCL on CUDA, gloo without (this part runs anywhere)."""
    run = work / "ddp"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "1",
            "-m",
            "srgan.cli",
            "train",
            "--config",
            "demo",
            *sets(
                [
                    *TINY,
                    f"train.device={device}",
                    "train.max_steps=10",
                    "train.pretrain_steps=5",
                    "data.workers=0",
                    f"train.run_dir={run}",
                ]
            ),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    ok = done.returncode == 0 and (run / "checkpoints" / "last.pt").is_file()
    return {
        "ok": ok,
        "backend": "nccl" if device == "cuda" else "gloo",
        "error": [] if ok else done.stderr.strip().splitlines()[-3:],
    }


# A run whose generator, at its second step, finds the GPU full: a pre-hook takes
# all but 64 MiB of the free memory, so the step's forward really runs out; the
# retry's call frees it. The micro-batch planned at start-up is what a user gets.
FORCED_OOM = """
import sys
import torch
import srgan.training.loop as loop
from srgan.configs import load_config
from srgan.training import train

class Hog:
    def __init__(self, trainer):
        self.trainer, self.tensor, self.done = trainer, None, False
    def __call__(self, module, args):
        if self.tensor is not None:  # the retry, at the smaller micro-batch
            self.tensor = None
            torch.cuda.empty_cache()
        elif not self.done and self.trainer.progress.step == 1:
            self.done = True
            free, _ = torch.cuda.mem_get_info()
            self.tensor = torch.empty(max(0, free - 64 * 2**20), dtype=torch.uint8, device="cuda")

planned = loop.Trainer.plan_micro_batch
def plan(self):
    chosen = planned(self)
    self.parts.generator.register_forward_pre_hook(Hog(self))
    return chosen
loop.Trainer.plan_micro_batch = plan
train(load_config(sys.argv[1], sys.argv[2:]))
"""


def check_memory_planning(work: Path) -> dict:
    """esrgan_x4 at a batch of 256 crops of 256 px, which no single GPU holds:
    the micro-batch planned and its peak, then an out-of-memory error forced
    at the second step, and that the run went on to its last step."""
    run = work / "memory-run"
    overrides = [
        "data.train=builtin:samples",
        "data.val=null",
        "data.batch_size=256",
        "data.crop_size=256",
        "data.workers=4",
        "train.max_steps=3",
        "train.pretrain_steps=3",
        "train.save_every=1",
        f"train.run_dir={run}",
    ]
    done = subprocess.run(
        [sys.executable, "-c", FORCED_OOM, "esrgan_x4", *overrides],
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = done.stderr.splitlines()
    status = json.loads((run / "run.json").read_text()) if (run / "run.json").is_file() else {}
    plan = status.get("micro_batch", {})
    changes = status.get("micro_batch_changes", [])
    ok = done.returncode == 0 and status.get("step") == 3 and bool(changes)
    return {
        "ok": ok,
        "plan_line": next((line.strip() for line in lines if "micro-batch" in line and "x" in line), None),
        "planned": plan,
        "recovery_line": next((line.strip() for line in lines if "out of memory at micro-batch" in line), None),
        "micro_batch_changes": changes,
        "error": [] if ok else lines[-3:],
    }


def check_gan_knobs(work: Path) -> dict:
    """Issue 38's stability knobs on CUDA under fp16 AMP, where R1's input
    gradient goes through the gradient scaler: the PatchGAN with spectral
    norm, hinge, R1 every 2 steps, gradient clipping and the warm-up; then a
    resume. Reports whether R1 and the gradient norms were logged and finite."""
    run = work / "gan-knobs"
    knobs = [
        "gan.discriminator=patchgan",
        "gan.d_loss=hinge",
        "gan.r1=1",
        "gan.r1_every=2",
        "gan.warmup_steps=5",
        "train.grad_clip=1",
        "train.precision=fp16",
    ]
    first = srgan(
        "train",
        "--config",
        "demo",
        *sets(
            [
                *TINY,
                *knobs,
                "train.device=cuda",
                "train.max_steps=20",
                "train.pretrain_steps=10",
                f"train.run_dir={run}",
            ]
        ),
        timeout=240,
    )
    if first.returncode != 0:
        return {"ok": False, "error": first.stderr.strip().splitlines()[-1:]}
    again = srgan("train", "--resume", str(run), "--set", "train.max_steps=26", timeout=240)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    r1 = [row["r1"] for row in rows if "r1" in row]
    norms = [row["d_grad_norm"] for row in rows if "d_grad_norm" in row]
    return {
        "ok": again.returncode == 0 and rows[-1]["step"] == 26 and bool(r1) and all(map(math.isfinite, r1)),
        "r1_rows": len(r1),
        "last_r1": r1[-1] if r1 else None,
        "d_grad_norm_max": max(norms) if norms else None,
        "error": again.stderr.strip().splitlines()[-1:],
    }


CHECKS = [
    ("cuda tests", check_cuda_tests, True),
    ("train + resume", check_train_and_resume, True),
    ("upscale", check_upscale, True),
    ("bench train", check_bench_train, True),
    ("bench upscale", check_bench_upscale, True),
    ("rrdb", check_rrdb, True),
    ("gan knobs", check_gan_knobs, True),
    ("degradations", check_degradations, True),
    ("torchrun, 1 rank", check_ddp_one_rank, False),
    ("memory planning", check_memory_planning, True),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    checks: dict[str, dict] = {}
    summary = {
        "cuda": cuda,
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "torch": torch.__version__,
        "checks": checks,
    }
    with tempfile.TemporaryDirectory(prefix="srgan-gpu-check-") as folder:
        for name, check, needs_cuda in CHECKS:
            if needs_cuda and not cuda:
                checks[name] = {"ok": None, "skipped": "no CUDA device (torch.cuda.is_available() is False)"}
                continue
            started = time.perf_counter()
            try:
                result = check(Path(folder))
            except subprocess.TimeoutExpired as error:
                result = {"ok": False, "error": f"timed out after {error.timeout} s"}
            result["check_seconds"] = round(time.perf_counter() - started, 1)
            checks[name] = result
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"gpu-check: {summary['gpu'] or 'no GPU'} (torch {summary['torch']})")
        for name, result in checks.items():
            state = "skipped" if result["ok"] is None else ("ok" if result["ok"] else "FAILED")
            details = {k: v for k, v in result.items() if k not in ("ok",)}
            print(f"  {name:18} {state:8} {json.dumps(details)}")
    failed = [name for name, result in checks.items() if result["ok"] is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
