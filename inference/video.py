"""Upscaling a video file: every frame through the generator, batched, with
the clip's own timestamps, its sound copied packet for packet, H.264 out.

Three threads overlap the work so that the network never waits for FFmpeg:
one decodes (and converts YUV to RGB), the calling thread runs the network,
one encodes and muxes. Bounded queues between them keep memory flat. A
failure in any of them stops the other two and reaches the caller; the
outputs stay temporary files until the last frame is in, then are renamed
(srgan.files.atomic.temporary_path), so a broken clip or a Ctrl-C leaves
nothing behind.

PyAV (the `video` extra; its wheels carry FFmpeg) is imported only when a
video is met."""

from __future__ import annotations

import contextlib
import logging
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from srgan.data.images import check_pixels
from srgan.files.atomic import temporary_path
from srgan.files.errors import SrganError, first_line
from srgan.files.inputs import note_listed
from srgan.inference.imageio import resize
from srgan.inference.options import UpscaleOptions
from srgan.inference.tile_grid import to_output_pixels
from srgan.inference.tile_pad import tile_pad
from srgan.inference.tiles import auto_tile, check_upscale_memory, frames_that_fit, upscale_tiled
from srgan.models import Runtime, SRGenerator
from srgan.models.runtime import is_out_of_memory

if TYPE_CHECKING:  # PyAV is optional
    from av.audio.stream import AudioStream
    from av.video.stream import VideoStream

log = logging.getLogger("srgan")

VIDEO_EXTENSIONS = (".mp4", ".mkv", ".mov", ".avi", ".webm")
# The containers the upscaled clip is written in (H.264 and the copied sound
# fit them), by the output's extension: FFmpeg's format names.
VIDEO_CONTAINERS = {".mp4": "mp4", ".mkv": "matroska", ".mov": "mov"}
INSTALL_HINT = "pip install 'srgan[video]'"
# FFmpeg's numbers for BT.709 (AVCOL_SPC_BT709, AVCOL_PRI_BT709 and AVCOL_TRC_BT709
# are all 1) and for limited, "MPEG", range (AVCOL_RANGE_MPEG).
BT709, LIMITED_RANGE = 1, 1
# With the network on the CPU, it and the encoder take turns at the cores
# (_Job.turns). Only bench/video.py sets it to False, to time them running at once.
TAKE_TURNS_ON_CPU = True
POLL_S = 0.1  # how often a thread waiting on a queue looks whether the job is being stopped

# Called with the number of frames upscaled so far after each batch. Tests
# raise KeyboardInterrupt from it: a Ctrl-C in the middle of a clip.
after_batch: Callable[[int], None] | None = None


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_EXTENSIONS


def find_videos(folder: Path) -> list[Path]:
    """Every file below `folder` with a video extension, in a stable order
    (each an input of the command: srgan.files.inputs)."""
    note_listed(folder, VIDEO_EXTENSIONS, "a video")
    return sorted(p for p in folder.rglob("*") if is_video(p) and p.is_file())


def compare_path(target: Path) -> Path:
    """clip_x4.mp4 -> clip_x4_compare.mp4: where --compare writes bicubic | SR."""
    return target.with_name(f"{target.stem}_compare{target.suffix}")


def video_outputs(target: Path, compare: bool) -> list[Path]:
    return [target, compare_path(target)] if compare else [target]


def require_av():
    """The PyAV module; raises SrganError, saying how to install it, when it is missing."""
    try:
        import av
    except ImportError:
        raise SrganError(f"upscaling videos needs PyAV, which is not installed: {INSTALL_HINT}") from None
    return av


def output_size(width: int, height: int, scale: int, outscale: float | None) -> tuple[int, int]:
    """(width, height) of the upscaled frames. yuv420p stores colour per 2x2
    pixels, so both must be even: scales 2, 4 and 8 always make them so; an
    odd side at x1 or x3, or an --outscale that does not, is rounded down to even."""
    final = scale if outscale is None else outscale
    if final == scale and width * scale % 2 == 0 and height * scale % 2 == 0:
        return width * scale, height * scale
    return max(2, round(width * final) // 2 * 2), max(2, round(height * final) // 2 * 2)


def frames_per_forward(
    network: SRGenerator, runtime: Runtime, height: int, width: int, tile: int | None, pad: int | None, batch: int
) -> tuple[int, int]:
    """(frames per forward pass, tile side): whole frames, as many of the
    `batch` asked as the memory budget holds; or, when one frame alone is
    over the budget (or --tile cuts it), one frame at a time in tiles."""
    if tile is None:
        fits = frames_that_fit(network, runtime, height, width, batch)
        if fits >= 1:
            return min(batch, fits), 0
        return 1, auto_tile(network, runtime, height, width, pad or 0)
    if tile == 0 or tile >= max(height, width):
        return batch, 0
    return 1, tile


@torch.inference_mode()
def upscale_batch(
    network: SRGenerator, frames: list[np.ndarray], runtime: Runtime, tile: int, pad: int | None
) -> np.ndarray:
    """N HxWx3 uint8 frames of one size -> Nx(sH)x(sW)x3 uint8: one forward
    pass for all of them when `tile` is 0, else each frame tile by tile."""
    images = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).float().div_(255)
    count, _, height, width = images.shape
    scale = network.scale
    out = np.empty((count, height * scale, width * scale, 3), dtype=np.uint8)
    if tile == 0 and count > 1:
        with runtime.autocast():
            sr = network(runtime.tensor(images))
        for i in range(count):
            out[i] = to_output_pixels(sr[i : i + 1], np.uint8, gray=False)
        return out
    for i in range(count):  # upscale_tiled halves the tile on an out-of-memory error
        upscale_tiled(network, images[i], runtime, out[i], tile, pad)
    return out


def upscale_video(
    network: SRGenerator, runtime: Runtime, source: Path, target: Path, options: UpscaleOptions
) -> list[Path]:
    """Write `target` (and its _compare twin with options.compare): every
    frame of `source` upscaled, its timestamps and sound kept. `network` is
    inference_network's. Returns the paths written; raises SrganError for a
    clip that cannot be decoded or written, leaving no file behind."""
    av = require_av()
    pad = options.tile_pad  # upscale_files decides it (inference/tile_pad.py)
    if pad is None and options.tile != 0:  # with --tile 0, None: measured only if memory cuts frames
        pad = tile_pad(network, runtime).pad
    targets = video_outputs(target, options.compare)
    with contextlib.ExitStack() as stack:
        temps = [stack.enter_context(temporary_path(t, options.force, inputs=(source,))) for t in targets]
        try:
            clip = av.open(str(source))
        except av.FFmpegError as error:
            raise SrganError(f"{source}: cannot be opened as a video ({first_line(error)})") from None
        stack.callback(clip.close)
        video, sound = _streams(av, source, clip)
        width, height = video.codec_context.width, video.codec_context.height
        if width <= 0 or height <= 0:
            raise SrganError(f"{source}: its video stream has no frame size")
        # The size the header declares, held to the image limits before a frame is decoded.
        check_pixels(source, width, height)
        check_upscale_memory(source, width, height, 1, network.scale, options.outscale)
        batch, tile = frames_per_forward(network, runtime, height, width, options.tile, pad, options.batch)
        size = output_size(width, height, network.scale, options.outscale)
        # With the network on the CPU, x264 encodes only in its turn (see _Job), so it
        # must encode synchronously, in one thread: a thread pool would go on encoding
        # after its turn ends. One thread still encodes far faster than the network
        # upscales on a CPU. With a GPU, x264 takes the threads it wants (0: FFmpeg's choice).
        threads = 1 if runtime.device.type == "cpu" else 0
        # The upscaled clip gets the sound; the comparison (bicubic | SR) is for the eyes.
        # Without a comparison there is one target, and zip stops after it.
        sinks = [
            _Sink(
                av,
                temp,
                path,
                size,
                _time_base(video),
                _rate(video),
                options.crf,
                threads,
                [] if compare else sound,
                compare,
            )
            for temp, path, compare in zip(temps, targets, (False, True), strict=False)
        ]
        for sink in sinks:
            stack.callback(sink.close)
        job = _Job(batch, take_turns=TAKE_TURNS_ON_CPU and runtime.device.type == "cpu")
        decoder = _Worker("srgan-decode", lambda: _decode(av, source, clip, video, sound, job), job)
        encoder = _Worker("srgan-encode", lambda: _encode(source, sinks, job), job)
        bar = tqdm(
            total=video.frames or None,
            unit="frame",
            desc=source.name,
            leave=False,
            dynamic_ncols=True,
            disable=not sys.stderr.isatty(),
        )  # nested in the files' bar, it moves the cursor with ANSI codes: terminals only
        stack.callback(bar.close)
        job.run([decoder, encoder], lambda: _upscale_frames(network, runtime, batch, tile, pad, job, bar))
    return targets


def _streams(av, source: Path, clip) -> tuple[VideoStream, list[AudioStream]]:
    """The first video stream (not a cover picture) and every sound stream."""
    videos = [s for s in clip.streams.video if not s.disposition & av.stream.Disposition.attached_pic]
    if not videos:
        raise SrganError(f"{source}: has no video stream")
    if len(videos) > 1:
        log.warning("%s: has %d video streams; only the first is upscaled", source, len(videos))
    others = len(clip.streams) - len(clip.streams.video) - len(clip.streams.audio)
    if others:
        log.warning(
            "%s: %d subtitle or data stream%s not carried over (only the video and its sound are)",
            source,
            others,
            "" if others == 1 else "s",
        )
    return videos[0], list(clip.streams.audio)


@dataclass
class _Frame:
    """A decoded frame (HxWx3 uint8) at `pts`, in the input stream's time base."""

    pixels: np.ndarray
    pts: int
    rotation: int  # degrees counterclockwise, from the clip's display matrix


@dataclass
class _Upscaled:
    pixels: np.ndarray  # the network's output
    lr: _Frame  # the decoded frame, for the timestamp and the bicubic half of --compare


_END = object()  # no more items


class _Stopped(Exception):
    """The job is being torn down because another thread failed."""


class _Pipe:
    """A bounded queue between two threads that gives up waiting when the
    job is stopped, so that no thread blocks forever on a dead partner."""

    def __init__(self, size: int, stop: threading.Event):
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = stop

    def put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
                return
            except queue.Full:
                pass
        raise _Stopped

    def get(self):
        while not self._stop.is_set():
            try:
                return self._queue.get(timeout=POLL_S)
            except queue.Empty:
                pass
        raise _Stopped


class _Job:
    """The two queues of one clip, the event that stops every thread, and
    `turns`, held while the network or the encoder computes.

    With the network on a GPU, `turns` is no lock: x264 encodes on the
    CPU's cores while the GPU upscales the next batch. On the CPU both
    want every core, and a network's threads run in step: a core taken by
    the encoder stalls them all at the next barrier, so running the two at
    once is slower than running them in turn (docs/performance.md#video).
    They take turns: the network runs until the encoder's queue is full,
    then the encoder frees a place; decoding, a small cost, still overlaps."""

    def __init__(self, batch: int, take_turns: bool):
        self.stop = threading.Event()
        self.decoded = _Pipe(2 * batch, self.stop)  # LR frames and sound packets
        self.upscaled = _Pipe(batch, self.stop)  # SR frames (scale**2 larger) and sound packets
        self.turns = threading.Lock() if take_turns else contextlib.nullcontext()

    def run(self, workers: list[_Worker], work: Callable[[], None]) -> None:
        """Start the workers, do `work` in this thread, wait for all of them;
        the first failure (this thread's, Ctrl-C included, or a worker's) is
        raised once every thread has ended."""
        for worker in workers:
            worker.start()
        try:
            work()
        except _Stopped:
            pass  # a worker failed: its error is raised below
        except BaseException:
            self.stop.set()
            raise
        finally:
            self._wait_for(workers)
        for worker in workers:
            if worker.failure is not None:
                raise worker.failure

    def _wait_for(self, workers: list[_Worker]) -> None:
        """Until every worker has ended. Ctrl-C or SIGTERM meanwhile (while the
        encoder flushes its last frames) stops them and waits on: the caller
        then closes the files they write, and closing one under the encoder
        can crash FFmpeg. A second interrupt ends the wait. It waits on an
        event, not on join: in Python 3.11 an interrupted join takes a running
        thread for ended (bpo-45274)."""

        def wait() -> None:
            for worker in workers:
                worker.ended.wait()
                worker.join()  # at once: its run() has returned

        try:
            wait()
        except BaseException:
            self.stop.set()
            wait()
            raise


class _Worker(threading.Thread):
    """A thread whose exception is kept for the calling thread and stops the job."""

    def __init__(self, name: str, work: Callable[[], None], job: _Job):
        super().__init__(name=name, daemon=True)  # daemon: a second Ctrl-C can still end the process
        self._work, self._job = work, job
        self.failure: BaseException | None = None
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            self._work()
        except _Stopped:
            pass
        except BaseException as error:
            self.failure = error
            self._job.stop.set()
        finally:
            self.ended.set()


def _decode(av, source: Path, clip, video, sound: list, job: _Job) -> None:
    """Demux the clip: frames, as RGB, and sound packets, in file order."""
    size = (video.codec_context.width, video.codec_context.height)
    time_base, rate = _time_base(video), _rate(video)
    step = max(1, round(1 / (time_base * rate)))
    last_pts, repeated = None, 0
    try:
        for packet in clip.demux(video, *sound):
            if packet.stream.type != "video":
                if packet.dts is not None:  # the empty packet that ends a stream carries nothing to copy
                    job.decoded.put(packet)
                continue
            for frame in packet.decode():  # the empty packet at the end flushes the decoder
                if (frame.width, frame.height) != size:
                    raise SrganError(
                        f"{source}: the frame size changes from {size[0]}x{size[1]} to "
                        f"{frame.width}x{frame.height} inside the clip; srgan cannot upscale that"
                    )
                # Containers without timestamps (some AVIs): one frame duration after the last.
                pts = frame.pts if frame.pts is not None else (0 if last_pts is None else last_pts + step)
                if last_pts is not None and pts <= last_pts:
                    repeated += 1  # an H.264 stream cannot hold two frames at one time
                    continue
                last_pts = pts
                job.decoded.put(_Frame(frame.to_ndarray(format="rgb24"), pts, frame.rotation))
    except av.FFmpegError as error:
        raise SrganError(f"{source}: cannot be decoded as a video ({first_line(error)})") from None
    # A cut-off Matroska or WebM file decodes without an error up to where it
    # stops: its header says how long it should be.
    expected, end = _expected_seconds(video), float((last_pts or 0) * time_base)
    if expected is not None and end < expected - max(0.5, float(2 / rate)):
        raise SrganError(
            f"{source}: truncated or damaged: its frames end at {end:.2f} s, its header says {expected:.2f} s"
        )
    if repeated:
        log.warning(
            "%s: %d frame%s with the timestamp of an earlier one left out",
            source,
            repeated,
            "" if repeated == 1 else "s",
        )
    job.decoded.put(_END)


def _expected_seconds(video) -> float | None:
    """How long the header says the video stream lasts: MP4's stream
    duration, or Matroska's DURATION tag (HH:MM:SS.fraction); None if neither."""
    if video.duration:
        return float(video.duration * _time_base(video))
    try:
        hours, minutes, seconds = video.metadata.get("DURATION", "").split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    except ValueError:
        return None


def _time_base(video) -> Fraction:
    """The stream's time base as a Fraction (newer PyAV returns its own rational type)."""
    return Fraction(video.time_base.numerator, video.time_base.denominator)


def _rate(video) -> Fraction:
    """Frames per second: the average, else FFmpeg's guess, else 25."""
    rate = video.average_rate or video.guessed_rate
    return Fraction(rate.numerator, rate.denominator) if rate else Fraction(25)


def _upscale_frames(
    network: SRGenerator, runtime: Runtime, batch: int, tile: int, pad: int | None, job: _Job, bar: tqdm
) -> None:
    """The network's thread: frames in batches of `batch`; sound packets
    passed straight on to the encoder."""
    pending: list[_Frame] = []
    done = 0
    while True:
        item = job.decoded.get()
        if isinstance(item, _Frame):
            pending.append(item)
            if len(pending) < batch:
                continue
        elif item is not _END:
            job.upscaled.put(item)
            continue
        if pending:
            frames = [frame.pixels for frame in pending]
            try:
                with job.turns:
                    sr = upscale_batch(network, frames, runtime, tile, pad)
            except (MemoryError, RuntimeError) as error:  # CUDA's, or the CPU allocator's: is_out_of_memory
                if not is_out_of_memory(error):
                    raise
                sr = None
            if sr is None:  # outside the except block, so that the failed batch's tensors are released first
                if runtime.device.type == "cuda":
                    torch.cuda.empty_cache()
                log.warning("out of memory with %d frames at once: going on one frame at a time", batch)
                batch = 1
                sr = np.concatenate([upscale_batch(network, [f], runtime, tile, pad) for f in frames])
            for frame, pixels in zip(pending, sr, strict=True):
                job.upscaled.put(_Upscaled(pixels, frame))
            done += len(pending)
            bar.update(len(pending))
            pending = []
            if after_batch is not None:
                after_batch(done)
        if item is _END:
            job.upscaled.put(_END)
            return


def _encode(source: Path, sinks: list[_Sink], job: _Job) -> None:
    """The encoder's thread: each SR frame into every output, sound packets
    into the first. An output is opened at its first frame (its rotation is
    known then); sound packets that come before it wait."""
    waiting: list = []  # sound packets
    while (item := job.upscaled.get()) is not _END:
        if isinstance(item, _Upscaled):
            with job.turns:
                for sink in sinks:
                    sink.write(item)
            for packet in waiting:
                sinks[0].copy(packet)
            waiting = []
        elif sinks[0].started:
            sinks[0].copy(item)
        else:
            waiting.append(item)
    if not sinks[0].started:
        raise SrganError(f"{source}: not one frame of it could be decoded")
    with job.turns:
        for sink in sinks:
            sink.finish()


class _Sink:
    """One output file: H.264 yuv420p at the input's timestamps, plus copies
    of the sound streams given; with `compare`, bicubic | SR side by side."""

    def __init__(
        self,
        av,
        temp: Path,
        target: Path,
        size: tuple[int, int],
        time_base: Fraction,
        rate: Fraction,
        crf: int,
        threads: int,
        sound: list,
        compare: bool,
    ):
        self.target, self.size, self.time_base, self.compare = target, size, time_base, compare
        self.av = av
        fmt = VIDEO_CONTAINERS[target.suffix.lower()]
        # faststart: the index at the front, so that players can start before the whole file has arrived.
        options = {"movflags": "+faststart"} if fmt in ("mp4", "mov") else {}
        try:
            self.container = av.open(str(temp), "w", format=fmt, options=options)
            self.video = self.container.add_stream(
                "libx264", rate=rate, options={"crf": str(crf), "threads": str(threads)}
            )
        except (av.FFmpegError, ValueError) as error:  # ValueError: an FFmpeg built without libx264
            raise SrganError(f"{target}: cannot be written as H.264 ({first_line(error)})") from None
        self.video.width = 2 * size[0] if compare else size[0]
        self.video.height, self.video.pix_fmt = size[1], "yuv420p"
        # The input's time base for the encoder and the stream: its timestamps
        # go through unrounded, variable frame rate included.
        self.video.codec_context.time_base = time_base
        self.video.time_base = time_base
        # BT.709, and tagged so: untagged, players guess the matrix from the frame size.
        context = self.video.codec_context
        context.colorspace = context.color_primaries = context.color_trc = BT709
        context.color_range = LIMITED_RANGE
        self.sound = {}
        for stream in sound:
            codec = stream.codec_context.name
            if codec not in self.container.supported_codecs:
                raise SrganError(
                    f"{target}: {codec} sound cannot be copied into a {target.suffix} file without "
                    "re-encoding it (give -o NAME.mkv)"
                )
            self.sound[stream.index] = self.container.add_stream_from_template(stream)
        self.started = self.finished = False

    def write(self, item: _Upscaled) -> None:
        pixels = item.pixels
        if pixels.shape[1::-1] != self.size:  # --outscale, or an even size to round to
            pixels = resize(pixels, self.size, Image.Resampling.LANCZOS)
        if self.compare:
            pixels = np.concatenate([resize(item.lr.pixels, self.size, Image.Resampling.BICUBIC), pixels], axis=1)
        frame = self.av.VideoFrame.from_ndarray(pixels, format="rgb24")
        frame = frame.reformat(format="yuv420p", dst_colorspace="ITU709", dst_color_range="MPEG")
        frame.pts, frame.time_base = item.lr.pts, self.time_base
        try:
            if not self.started and item.lr.rotation:
                self._mark_rotation(item.lr.rotation)
            self.started = True
            for packet in self.video.encode(frame):
                self.container.mux(packet)
        except self.av.FFmpegError as error:
            raise SrganError(f"{self.target}: cannot be encoded ({first_line(error)})") from None

    def _mark_rotation(self, degrees: int) -> None:
        """Players turn the output as they turn the input (the frames stay as stored)."""
        if hasattr(self.video, "set_display_rotation"):  # PyAV >= 18
            self.video.set_display_rotation(degrees)
        else:
            log.warning(
                "%s: the input is shown turned by %d degrees; this PyAV (%s) cannot mark the output so "
                "(PyAV >= 18 can)",
                self.target,
                degrees,
                self.av.__version__,
            )

    def copy(self, packet) -> None:
        """A sound packet, as it is: no decoding, no re-encoding."""
        packet.stream = self.sound[packet.stream.index]
        try:
            self.container.mux(packet)
        except self.av.FFmpegError as error:
            raise SrganError(f"{self.target}: cannot be written ({first_line(error)})") from None

    def finish(self) -> None:
        """The encoder's last frames, then the container's index."""
        try:
            for packet in self.video.encode(None):
                self.container.mux(packet)
            self.container.close()
        except self.av.FFmpegError as error:
            raise SrganError(f"{self.target}: cannot be written ({first_line(error)})") from None
        self.finished = True

    def close(self) -> None:
        """Release the file after a failure; its temporary file is then removed."""
        if not self.finished:
            with contextlib.suppress(Exception):
                self.container.close()
