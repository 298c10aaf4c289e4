"""`srgan bench video`: frames/s of `srgan upscale clip.mp4` (decoding,
the network and encoding overlapped in three threads) against the network
alone on the same decoded frames, timed in one run; with decoding and
encoding alone, and what running the three one after another would give.

Also the one writer of test clips (a pan over a photo, an AAC tone), which
tests/test_video.py uses too."""

from __future__ import annotations

import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from srgan.bench.machine import inference_setup, machine, peak_rss_mb, synchronize
from srgan.bench.upscale import test_photo
from srgan.inference import video
from srgan.inference.options import UpscaleOptions
from srgan.inference.tile_pad import tile_pad
from srgan.inference.upscale import inference_network
from srgan.inference.video import frames_per_forward, require_av, upscale_batch, upscale_video
from srgan.models import Runtime, SRGenerator

SAMPLE_RATE = 22050  # of the test clips' tone


def panning_frames(photo: np.ndarray, width: int, height: int, count: int) -> list[np.ndarray]:
    """`count` width x height views of `photo`, moving one pixel down and two right per frame;
    raises ValueError when `photo` is too small for them."""
    if photo.shape[0] < height + count or photo.shape[1] < width + 2 * count:
        raise ValueError(
            f"a {photo.shape[1]}x{photo.shape[0]} photo is too small for {count} frames of {width}x{height}"
        )
    return [np.ascontiguousarray(photo[i : i + height, 2 * i : 2 * i + width]) for i in range(count)]


def write_clip(
    path: Path,
    frames: list[np.ndarray],
    times: list[float] | None = None,
    fmt: str = "mp4",
    sound: bool = True,
    crf: int = 12,
) -> Path:
    """H.264 (yuv420p) of `frames` at `times` (seconds; default 25 fps: a
    variable frame rate when they are uneven), in a millisecond time base,
    with a 440 Hz AAC tone as long as the clip when `sound`. Returns `path`;
    raises SrganError without PyAV."""
    av = require_av()
    times = [i / 25 for i in range(len(frames))] if times is None else times
    height, width = frames[0].shape[:2]
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream("libx264", rate=25, options={"crf": str(crf)})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.time_base = stream.time_base = Fraction(1, 1000)
        tone = out.add_stream("aac", rate=SAMPLE_RATE, layout="mono") if sound else None
        for pixels, seconds in zip(frames, times, strict=True):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = round(seconds * 1000), stream.time_base
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
        if tone is not None:
            samples = round((times[-1] + 0.04) * SAMPLE_RATE)
            wave = (0.3 * np.sin(2 * np.pi * 440 * np.arange(samples) / SAMPLE_RATE)).astype(np.float32)
            for start in range(0, samples, 1024):
                chunk = av.AudioFrame.from_ndarray(
                    wave[None, start : start + 1024].copy(), format="fltp", layout="mono"
                )
                chunk.sample_rate, chunk.pts = SAMPLE_RATE, start
                out.mux(tone.encode(chunk))
            out.mux(tone.encode(None))
    return path


def decode_frames(path: Path) -> list[np.ndarray]:
    """Every frame of the first video stream, as HxWx3 uint8 RGB."""
    av = require_av()
    with av.open(str(path)) as clip:
        return [frame.to_ndarray(format="rgb24") for frame in clip.decode(clip.streams.video[0])]


def bench_video(
    generator: SRGenerator,
    runtime: Runtime,
    width: int,
    height: int,
    frames: int,
    batch: int,
    iters: int,
    warmup: int,
    compare_overlap: bool = False,
) -> dict:
    """Frames/s of upscale_video on a width x height clip of `frames` frames
    (and sound), and of its network alone on the same frames, timed in turn
    `iters` times after `warmup` rounds; medians. `compare_overlap`: also
    time the pipeline with the network and the encoder running at once on
    the CPU, rather than in turn (inference/video.py's _Job). Returns the
    figures as one JSON-ready dict."""
    network = inference_network(generator.eval(), runtime)
    pad = tile_pad(network, runtime).pad  # measured (or cached) before the timing
    per_forward, tile = frames_per_forward(network, runtime, height, width, None, pad, batch)
    times: dict[str, list[float]] = {"pipeline": [], "network": [], "decode": [], "encode": []}
    if compare_overlap:
        times["pipeline_overlapped"] = []
    with tempfile.TemporaryDirectory() as folder:
        clip = write_clip(
            Path(folder) / "clip.mp4",
            panning_frames(test_photo(width + 2 * frames, height + frames), width, height, frames),
        )
        options = UpscaleOptions(batch=batch, force=True, tile_pad=pad)
        for i in range(warmup + iters):
            started = time.perf_counter()
            lr = decode_frames(clip)
            decoded = time.perf_counter()
            sr = [
                upscale_batch(network, lr[j : j + per_forward], runtime, tile, pad)
                for j in range(0, frames, per_forward)
            ]
            synchronize(runtime.device)
            upscaled = time.perf_counter()
            write_clip(Path(folder) / "alone.mp4", list(np.concatenate(sr)), sound=False, crf=18)
            encoded = time.perf_counter()
            upscale_video(network, runtime, clip, Path(folder) / "clip_x.mp4", options)
            piped = time.perf_counter()
            if i >= warmup:
                times["decode"].append(decoded - started)
                times["network"].append(upscaled - decoded)
                times["encode"].append(encoded - upscaled)
                times["pipeline"].append(piped - encoded)
            if compare_overlap:
                video.TAKE_TURNS_ON_CPU = False
                try:
                    started = time.perf_counter()
                    upscale_video(network, runtime, clip, Path(folder) / "clip_x.mp4", options)
                    if i >= warmup:
                        times["pipeline_overlapped"].append(time.perf_counter() - started)
                finally:
                    video.TAKE_TURNS_ON_CPU = True
    fps = {f"{name}_fps": frames / statistics.median(values) for name, values in times.items()}
    serial = frames / sum(statistics.median(times[name]) for name in ("decode", "network", "encode"))
    return {
        "bench": "video",
        "width": width,
        "height": height,
        "frames": frames,
        **inference_setup(generator, runtime),
        "batch": per_forward,
        "turns": runtime.device.type == "cpu",  # the network and the encoder take turns at the cores
        "tile": tile,
        "iters": iters,
        **{key: round(value, 3) for key, value in fps.items()},
        "serial_fps": round(serial, 3),  # decode, network, encode one after another
        "pipeline_over_network": round(fps["pipeline_fps"] / fps["network_fps"], 3),
        "pipeline_over_serial": round(fps["pipeline_fps"] / serial, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        **machine(),
    }
