"""`srgan bench data`: how fast the configured training data comes out of the
DataLoader (crops per second, per worker) and what memory every process of
it holds; and `srgan bench photos`: DIV2K-like photos to measure it on when
no real set is at hand."""

from __future__ import annotations

import io
import os
import statistics
import time
from pathlib import Path

import numpy as np
from PIL import Image
from torch.utils.data import DataLoader

from srgan.bench.machine import machine
from srgan.configs import Config
from srgan.data import EpochSampler, PreparedImages
from srgan.data.paired import PairedImages, open_image_set, training_crops
from srgan.files import check_output, write_bytes
from srgan.files.errors import SrganError
from srgan.training.loop import shutdown_workers
from srgan.training.signals import ignore_interrupts_in_worker

PHOTOS = ("astronaut", "coffee", "chelsea", "hubble_deep_field", "immunohistochemistry")  # shipped, no download


SAMPLE_EVERY_S = 0.25  # how often the processes' memory is read (a read of all of them costs milliseconds)


def bench_data(config: Config, batches: int, warmup: int = 2) -> dict:
    """Time `batches` batches of the configured data.train after `warmup`
    untimed ones, epochs following each other as in training, sampling the
    memory of the main process and of each worker along the way; returns the
    figures as one JSON-ready dict."""
    d = config.data
    started = time.perf_counter()
    image_set = open_image_set(
        d.train, d.train_lr, "data.train", "data.train_lr", config.model.scale, d.crop_size, d.cache_mb
    )
    dataset = training_crops(image_set, d.crop_size, config.model.scale, d.repeat, config.train.seed, d.pipeline)
    images = image_set.hr if isinstance(image_set, PairedImages) else image_set  # paired: the HR side's source
    sampler = EpochSampler(len(dataset), d.batch_size, config.train.seed)
    loader = DataLoader(
        dataset,
        batch_size=d.batch_size,
        sampler=sampler,
        num_workers=d.workers,
        persistent_workers=d.workers > 0,
        worker_init_fn=ignore_interrupts_in_worker,
        drop_last=True,
    )
    setup_s = time.perf_counter() - started
    times: list[float] = []
    peaks = {"rss": 0.0, "pss": 0.0, "main_private": 0.0, "worker_private": 0.0}
    epoch = 0
    cpu_start = _cpu_seconds() if warmup == 0 else 0.0
    # A batch's time runs from the previous batch's arrival to its own, with
    # everything between counted: the next epoch's start, and the memory
    # sampling, during which workers go on producing. Leaving that time out
    # would let a worker refill its prefetch queue unclocked and overstate the
    # pairs/s a worker makes. The bench samples memory only every
    # SAMPLE_EVERY_S, so that its cost stays a small share of the window.
    last = time.perf_counter()
    last_sample = 0.0  # the first batch's arrival samples
    try:
        while len(times) < warmup + batches:
            epoch += 1
            sampler.set_epoch(epoch)
            for _ in loader:
                now = time.perf_counter()
                times.append(now - last)
                last = now
                if len(times) == warmup:
                    cpu_start = _cpu_seconds()
                if now - last_sample > SAMPLE_EVERY_S or len(times) == warmup + batches:
                    _sample_memory(peaks)
                    last_sample = time.perf_counter()
                if len(times) == warmup + batches:
                    break
        cpu_s = _cpu_seconds() - cpu_start
    finally:
        shutdown_workers(loader)
    timed = times[warmup:]
    kind = ("paired-" if isinstance(image_set, PairedImages) else "") + (
        "prepared"
        if isinstance(images, PreparedImages)
        else (
            "folder-cached"
            if images.cached == len(images)
            else "folder-uncached"
            if not images.cached
            else "folder-partly-cached"
        )
    )
    crops_per_s = d.batch_size * len(timed) / sum(timed)
    return {
        "bench": "data",
        "source": kind,
        "images": len(images),
        "workers": d.workers,
        "batch": d.batch_size,
        "crop": d.crop_size,
        "scale": config.model.scale,
        "degradation": d.degradation,
        "batches": len(timed),
        "setup_s": round(setup_s, 2),
        "median_ms_per_batch": round(1000 * statistics.median(timed), 2),
        "crops_per_s": round(crops_per_s, 1),
        "pairs_per_s": round(crops_per_s, 1),  # (lr, hr) pairs: with realesrgan, each LR degraded
        # CPU time of every process (main and workers) a pair: what a pair costs
        # whatever else the machine runs (workers' prefetching counts in it)
        "cpu_ms_per_pair": round(1000 * cpu_s / (d.batch_size * len(timed)), 2),
        "crops_per_s_per_worker": round(crops_per_s / max(1, d.workers), 1),
        "peak_rss_mb": round(peaks["rss"], 1),  # all processes; shared pages count in each
        "peak_pss_mb": round(peaks["pss"], 1),  # all processes; shared pages split between them
        # memory only this process wrote (Private_Dirty): what it adds; mapped file pages it merely read are not
        "main_private_mb": round(peaks["main_private"], 1),
        "worker_private_mb": round(peaks["worker_private"], 1),
        **machine(),
    }


def _sample_memory(peaks: dict) -> None:
    main = os.getpid()
    pids = [main, *_children(main)]
    totals = {"rss": 0.0, "pss": 0.0}
    for pid in pids:
        fields = _smaps_rollup(pid)
        totals["rss"] += fields.get("Rss", 0) / 1024
        totals["pss"] += fields.get("Pss", 0) / 1024
        # written by it: its allocations and copies, not mapped file pages
        private = fields.get("Private_Dirty", 0) / 1024
        key = "main_private" if pid == main else "worker_private"
        peaks[key] = max(peaks[key], private)
    for key, value in totals.items():
        peaks[key] = max(peaks[key], value)


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its children (the
    DataLoader workers) so far, from /proc (Linux; 0 elsewhere)."""
    main = os.getpid()
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for pid in [main, *_children(main)]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return total / ticks


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            pass
    return found


def _smaps_rollup(pid: int) -> dict[str, int]:
    """kB figures of /proc/PID/smaps_rollup (Linux); empty elsewhere."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return {}
    fields = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0])
    return fields


def make_photos(folder: Path, count: int, width: int, height: int, force: bool = False) -> list[Path]:
    """`count` distinct photos of width x height, like DIV2K's: scikit-image's
    photos cut differently, flipped, resized with Lanczos and given a little
    sensor-like noise (so that their PNGs cost what real photos cost to
    decode; a smooth upscale compresses far better). Returns their paths;
    raises SrganError, before writing any, when one exists and not `force`."""
    import skimage.data  # the samples extra: only `srgan bench photos` needs it

    rng = np.random.default_rng(0)
    targets = [Path(folder) / f"{n:04d}.png" for n in range(1, count + 1)]
    for target in targets:
        check_output(target, force)
    for n, target in enumerate(targets):
        photo = getattr(skimage.data, PHOTOS[n % len(PHOTOS)])()
        photo = np.stack([photo] * 3, axis=2) if photo.ndim == 2 else photo[:, :, :3]
        h, w = photo.shape[:2]
        ch, cw = int(h * rng.uniform(0.6, 1.0)), int(w * rng.uniform(0.6, 1.0))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        part = photo[top : top + ch, left : left + cw]
        if n % 2:
            part = part[:, ::-1]
        big = np.asarray(Image.fromarray(np.ascontiguousarray(part)).resize((width, height), Image.Resampling.LANCZOS))
        noisy = np.clip(big.astype(np.float32) + rng.normal(0, 3.0, big.shape), 0, 255).astype(np.uint8)
        png = io.BytesIO()
        Image.fromarray(noisy).save(png, format="PNG")
        write_bytes(target, png.getvalue(), overwrite=force)
    return targets


def check_photo_size(size: str) -> tuple[int, int]:
    """(width, height) from `--size` WxH; raises SrganError for another form or a side outside 16..8192."""
    try:
        width, height = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise SrganError(f"--size: expected WxH such as 2040x1400, got {size!r}") from None
    if not (16 <= width <= 8192 and 16 <= height <= 8192):
        raise SrganError(f"--size: expected sides of 16 to 8192 px, got {size}")
    return width, height
