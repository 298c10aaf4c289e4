"""`srgan bench upscale`: the project's upscaling path (tiled, channels_last,
inference_mode, the precision rules) against a plain fp32 NCHW forward of
the same generator, and with --onnx against onnxruntime running the
exported graph (srgan export), timed in one run."""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from srgan.bench.machine import inference_setup, machine, peak_rss_mb, synchronize
from srgan.data import load_rgb8
from srgan.data.samples import sample_paths
from srgan.files.errors import SrganError, first_line
from srgan.inference.export import onnx_session, require_export_extra
from srgan.inference.tile_pad import tile_pad
from srgan.inference.tiles import auto_tile, check_upscale_memory, needs_tiles, upscale_tiled
from srgan.inference.upscale import inference_network, upscale_pixels
from srgan.models import Runtime, SRGenerator
from srgan.models.memory import mem_available


def test_photo(width: int, height: int) -> np.ndarray:
    """A real photo (scikit-image's astronaut) resized to the size, or noise without scikit-image."""
    try:
        photo = load_rgb8(sample_paths(["astronaut"])[0])
        return np.array(Image.fromarray(photo).resize((width, height), Image.Resampling.BICUBIC))
    except Exception:  # no scikit-image: the cost is the same on noise
        return np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)


def timed(fn, iters: int, warmup: int, device: torch.device) -> list[float]:
    """Seconds of each of `iters` calls of `fn` after `warmup` untimed ones, `device` synchronised in each."""
    times = []
    for i in range(warmup + iters):
        started = time.perf_counter()
        fn()
        synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - started)
    return times


def bench_upscale(
    generator: SRGenerator,
    runtime: Runtime,
    width: int,
    height: int,
    iters: int,
    warmup: int,
    baseline: bool = True,
    onnx: Path | None = None,
) -> dict:
    """Time srgan's upscaling path on a width x height photo against the plain
    fp32 whole-image forward (with `baseline`) and, with `onnx`, onnxruntime
    running that file; returns the figures as one JSON-ready dict. Raises
    SrganError when the result or the plain forward would not fit in memory,
    or the ONNX file cannot be loaded."""
    check_upscale_memory("--size", width, height, 1, generator.scale, None)
    available = mem_available()
    # the plain forward holds the whole image's activations: the last x2 stage's, twice, in fp32
    plain_bytes = width * height * generator.scale**2 * generator.channels * 4 * 2
    if baseline and runtime.device.type == "cpu" and available is not None and plain_bytes > 0.8 * available:
        raise SrganError(
            f"--size {width}x{height}: the plain whole-image forward would need about "
            f"{plain_bytes / 2**30:.0f} GiB, more than the {available / 2**30:.0f} GiB available; "
            "use --no-baseline or a smaller --size"
        )
    # a missing extra or a bad file is refused before the timing
    session = onnxruntime_session(onnx) if onnx is not None else None
    generator = generator.eval()
    network = inference_network(generator, runtime)
    image = test_photo(width, height)
    out_mp = width * height * generator.scale**2 / 1e6
    # measured (or cached) before the timing, as `srgan upscale` decides it once per command
    pad = tile_pad(network, runtime).pad if needs_tiles(network, runtime, height, width, None) else 0
    tile = auto_tile(generator, runtime, height, width, pad)
    ours = timed(lambda: upscale_pixels(network, image, runtime, pad=pad), iters, warmup, runtime.device)
    result = {
        "bench": "upscale",
        "width": width,
        "height": height,
        **inference_setup(generator, runtime),
        "tile": tile,
        "tile_pad": pad,
        "iters": iters,
        "median_s": statistics.median(ours),
        "min_s": min(ours),
        "output_mp_per_s": out_mp / statistics.median(ours),
        "peak_rss_mb": round(peak_rss_mb(), 1),  # before the baseline's whole-image forward
        **machine(),
    }
    if onnx is not None:
        upscaled = upscale_pixels(network, image, runtime, pad=pad)
        result.update(bench_onnxruntime(session, onnx, image, upscaled, statistics.median(ours), iters, warmup))
    if not baseline:
        return result

    # The plain forward: the same weights, fp32, NCHW, the whole image at once.
    # Module.to takes a device and a memory_format at once; torch's stubs list them apart.
    plain = (
        copy.deepcopy(generator)
        .to(  # type: ignore[call-overload]
            runtime.device, memory_format=torch.contiguous_format
        )
        .float()
    )
    x = torch.from_numpy(image).permute(2, 0, 1)[None].float().div(255).to(runtime.device)

    def plain_forward():
        with torch.no_grad():
            return plain(x)

    base = timed(plain_forward, iters, warmup, runtime.device)
    reference = plain_forward()[0].permute(1, 2, 0).clamp(0, 1).cpu().numpy()
    ours_fp32 = np.empty(reference.shape, dtype=np.float32)
    fp32 = dataclasses.replace(runtime, precision="fp32")
    upscale_tiled(network, x[0].cpu(), fp32, ours_fp32, tile, pad)
    result.update(
        {
            "baseline_median_s": statistics.median(base),
            "speedup": statistics.median(base) / statistics.median(ours),
            "fp32_max_abs_diff": float(np.abs(ours_fp32 - reference).max()),
        }
    )
    return result


def bench_onnxruntime(
    session, path: Path, image: np.ndarray, upscaled: np.ndarray, torch_median_s: float, iters: int, warmup: int
) -> dict:
    """onnxruntime (CPU) on the same image, the whole image at once, with as
    many threads as torch uses; its 8-bit output compared with srgan's. Timed
    as srgan's path is, from 8-bit pixels to 8-bit pixels. Raises SrganError
    when its output size differs from srgan's."""
    graph_input = session.get_inputs()[0]
    dtype = np.float16 if graph_input.type == "tensor(float16)" else np.float32
    outputs: list[np.ndarray] = []

    def run() -> None:
        x = (image.transpose(2, 0, 1)[None].astype(np.float32) / 255).astype(dtype)
        (y,) = session.run(None, {graph_input.name: x})
        outputs[:] = [np.rint(np.clip(y[0].astype(np.float32), 0, 1) * 255).astype(np.uint8).transpose(1, 2, 0)]

    times = timed(run, iters, warmup, torch.device("cpu"))
    levels = outputs[0]
    if levels.shape != upscaled.shape:
        raise SrganError(
            f"{path}: its output is {levels.shape[1]}x{levels.shape[0]}, "
            f"srgan's {upscaled.shape[1]}x{upscaled.shape[0]}: not the same model"
        )
    return {
        "onnx": str(path),
        "onnx_runtime": f"onnxruntime {onnxruntime_version()} CPUExecutionProvider",
        "onnx_input_type": graph_input.type,
        "onnx_threads": session.get_session_options().intra_op_num_threads,
        "onnx_median_s": statistics.median(times),
        "onnx_min_s": min(times),
        "onnx_over_torch": statistics.median(times) / torch_median_s,
        "onnx_max_level_diff": int(np.abs(levels.astype(np.int16) - upscaled.astype(np.int16)).max()),
    }


def onnxruntime_session(path: Path):
    """A CPU session of the file with torch's thread count. Raises SrganError
    without onnxruntime, and for a file that is missing or that it cannot load."""
    require_export_extra("--onnx", ("onnxruntime",))
    if not Path(path).is_file():
        raise SrganError(f"{path}: no such ONNX file")
    try:
        return onnx_session(str(path), torch.get_num_threads())
    except Exception as error:  # onnxruntime's own exception types: not an ONNX file, an unknown op...
        raise SrganError(f"{path}: onnxruntime cannot load it ({first_line(error)})") from None


def onnxruntime_version() -> str:
    import onnxruntime  # the export extra: only --onnx needs it

    return onnxruntime.__version__
