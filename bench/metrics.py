"""`srgan bench metrics`: what each validation metric costs a validation
image, against PSNR/SSIM alone, on the configured data.val and generator
(random weights: the same arithmetic as trained ones)."""

from __future__ import annotations

import time

from srgan.bench.machine import machine
from srgan.configs import Config
from srgan.data import open_images
from srgan.files.errors import SrganError
from srgan.metrics import ImageScores
from srgan.models import build_generator, resolve_runtime
from srgan.training.validation import checked_validation_set, validate


def bench_metrics(config: Config, extra: list[str], repeats: int = 3) -> dict:
    """Seconds a validation image (the generator's upscale and the scores),
    for PSNR/SSIM alone and with each of `extra` added; the fastest of
    `repeats` passes over the set, after one untimed pass. Also the seconds
    each metric's network takes to load. Raises SrganError when data.val is
    null."""
    runtime = resolve_runtime(config.train.device, "fp32")
    scale = config.model.scale
    if not config.data.val:
        raise SrganError("data.val: expected the validation images to time (it is null)")
    images = open_images(config.data.val, "data.val", 2 * scale + 11)
    generator = build_generator(config.model).to(runtime.device)
    rows: list[dict] = []
    for added in [None, *extra]:
        names = ["psnr", "ssim"] + ([added] if added else [])
        started = time.perf_counter()
        scores = ImageScores(names, runtime.device, "--metrics")
        load_s = time.perf_counter() - started
        val, _ = checked_validation_set(images, scale, config.data.val_max_size, scores)
        validate(generator, val, runtime, scores)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            validate(generator, val, runtime, scores)
            best = min(best, time.perf_counter() - started)
        rows.append({"metrics": names, "s_per_image": best / len(val), "load_s": load_s, "images": len(val)})
    base = rows[0]["s_per_image"]
    for row in rows:
        row["ratio"] = row["s_per_image"] / base
    return {"machine": machine(), "rows": rows}
