"""`srgan upscale` on videos: every frame as the image path upscales it, the
clip's timestamps and sound kept, nothing left behind by a broken clip or a
Ctrl-C. The clips are made here with PyAV: a real photo panning across a
64x48 frame, with an AAC tone."""

from __future__ import annotations

import sys
import threading
from fractions import Fraction

import numpy as np
import pytest
import torch

import test_upscale
from conftest import run_cli, skimage_photo
from srgan.bench.video import panning_frames, write_clip
from srgan.inference import video
from srgan.inference.upscale import upscale_rgb8
from srgan.metrics import psnr_y
from srgan.models import Runtime
from test_upscale import random_generator

av = pytest.importorskip("av")

# The same tiny generator's fixture as test_upscale's (an assignment, which a test's
# parameter of that name may shadow; an imported name would look unused).
checkpoint = test_upscale.checkpoint

CPU32 = Runtime(torch.device("cpu"), "fp32")
CPU = ("--device", "cpu", "--precision", "fp32")


def make_clip(path, frames: int = 12, fmt: str = "mp4", times: list[float] | None = None, sound: bool = True):
    """`frames` frames of 64x48 (a pan over a photo) at 25 fps, or at
    `times` (seconds: a variable frame rate), with an AAC tone as long as the clip."""
    count = frames if times is None else len(times)
    return write_clip(
        path, panning_frames(skimage_photo("astronaut")[40:200, 100:300], 64, 48, count), times, fmt, sound
    )


def decode(path) -> tuple[list[np.ndarray], list[Fraction]]:
    """RGB frames and their times (seconds) of the first video stream."""
    with av.open(str(path)) as clip:
        frames = list(clip.decode(clip.streams.video[0]))
        return [f.to_ndarray(format="rgb24") for f in frames], [f.pts * f.time_base for f in frames]


def sound_of(path) -> tuple[str, Fraction, list[bytes]]:
    """The sound stream's codec, duration (seconds) and packets' bytes."""
    with av.open(str(path)) as clip:
        stream = clip.streams.audio[0]
        packets = [bytes(p) for p in clip.demux(stream) if p.size]
        return stream.codec_context.name, stream.duration * stream.time_base, packets


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """The project's PSNR (Y channel, BT.601) of two HxWx3 uint8 frames. On
    RGB the 4:2:0 chroma of yuv420p alone caps it near 35.7 dB for this
    random generator's noisy colour, H.264 or not."""
    return psnr_y(torch.from_numpy(a).permute(2, 0, 1), torch.from_numpy(b).permute(2, 0, 1), border=0)


def leftovers(folder) -> list[str]:
    """What srgan left in `folder`, temporary files included, beyond the inputs."""
    return sorted(p.name for p in folder.iterdir() if "_x4" in p.name or p.name.startswith("."))


# --- the clip ---------------------------------------------------------------


def test_every_frame_as_the_image_path_with_its_timestamps_and_sound(checkpoint, tmp_path):
    """A variable-frame-rate clip (25 fps, then 12.5) in 3-frame batches:
    frames, size, times, rate and the sound's bytes survive, and each frame
    is the image path's upscale of the decoded input frame, through H.264."""
    path, g = checkpoint
    times = [i / 25 for i in range(8)] + [8 / 25 + i * 2 / 25 for i in range(6)]
    clip = make_clip(tmp_path / "clip.mp4", times=times)
    result = run_cli("upscale", clip, "-k", path, "--batch", "3", "--compare", *CPU)
    assert result.returncode == 0, result.stderr
    out, compare = tmp_path / "clip_x4.mp4", tmp_path / "clip_x4_compare.mp4"
    assert result.stdout.split() == [str(out), str(compare)]

    lr, lr_times = decode(clip)
    sr, sr_times = decode(out)
    assert len(sr) == len(lr) == 14 and sr[0].shape == (192, 256, 3)
    assert sr_times == lr_times  # exactly: the input's time base is kept
    with av.open(str(clip)) as a, av.open(str(out)) as b:
        assert b.streams.video[0].guessed_rate == a.streams.video[0].guessed_rate == 25
    codec, duration, packets = sound_of(out)
    assert (codec, duration) == sound_of(clip)[:2] and duration > Fraction(1, 2)
    assert packets == sound_of(clip)[2]  # copied, not re-encoded
    scores = [psnr(upscale_rgb8(g, frame, CPU32), got) for frame, got in zip(lr, sr, strict=True)]
    assert min(scores) > 35, scores

    side, side_times = decode(compare)
    assert len(side) == 14 and side[0].shape == (192, 512, 3) and side_times == lr_times
    assert psnr(side[5][:, 256:], sr[5]) > 35  # the right half is the SR frame
    with av.open(str(compare)) as c:
        assert not c.streams.audio


def test_a_folder_of_an_image_and_a_video_and_no_overwrite(checkpoint, tmp_path):
    """Each in kind, into -o; a second run is refused before any work (exit
    2) unless --force. A Matroska clip without sound comes out as .mp4."""
    from PIL import Image

    path, _ = checkpoint
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    make_clip(src / "walk.mkv", frames=6, fmt="matroska", sound=False)
    Image.fromarray(skimage_photo("coffee")[:20, :24]).save(src / "cup.png")
    result = run_cli("upscale", src, "-k", path, "-o", out, *CPU)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["cup_x4.png", "walk_x4.mp4"]
    assert Image.open(out / "cup_x4.png").size == (96, 80)
    frames, _ = decode(out / "walk_x4.mp4")
    assert len(frames) == 6 and frames[0].shape == (192, 256, 3)

    again = run_cli("upscale", src, "-k", path, "-o", out, *CPU)
    assert again.returncode == 2 and "exists (use --force" in again.stderr, again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert run_cli("upscale", src, "-k", path, "-o", out, "--force", *CPU).returncode == 0


def test_named_output_and_its_kind(checkpoint, tmp_path):
    path, _ = checkpoint
    clip = make_clip(tmp_path / "clip.mp4", frames=4, sound=False)
    named = run_cli("upscale", clip, "-k", path, "-o", tmp_path / "big.mkv", *CPU)
    assert named.returncode == 0, named.stderr
    assert len(decode(tmp_path / "big.mkv")[0]) == 4
    wrong = run_cli("upscale", clip, "-k", path, "-o", tmp_path / "big.png", *CPU)
    assert wrong.returncode == 2 and "is a video; expected a file name ending in .mkv, .mov, .mp4" in wrong.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch", "0"], "--batch: expected a number of frames >= 1"),
        (["--crf", "52"], "--crf: expected 0 to 51"),
        (["-o", "{tmp}/out.avi"], "cannot write .avi files"),
    ],
)
def test_video_option_mistakes_exit_2_before_any_work(checkpoint, tmp_path, args, message):
    path, _ = checkpoint
    clip = make_clip(tmp_path / "clip.mp4", frames=2, sound=False)
    result = run_cli("upscale", clip, "-k", path, *[a.replace("{tmp}", str(tmp_path)) for a in args], *CPU)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert leftovers(tmp_path) == []


# --- broken clips and interruptions ------------------------------------------


@pytest.mark.parametrize("fmt, name", [("mp4", "cut.mp4"), ("matroska", "cut.mkv")])
def test_a_truncated_clip_fails_alone_and_leaves_nothing(checkpoint, tmp_path, fmt, name):
    """An MP4 cut in half has lost its index: it does not open. A Matroska
    file cut in half decodes up to the cut: its header's duration gives it
    away, after its frames went through the network."""
    path, _ = checkpoint
    whole = make_clip(tmp_path / f"whole.{name.split('.')[1]}", frames=40, fmt=fmt, sound=fmt == "mp4")
    data = whole.read_bytes()
    (tmp_path / name).write_bytes(data[: len(data) // 2])
    whole.unlink()
    threads = threading.active_count()
    result = run_cli("upscale", tmp_path / name, "-k", path, *CPU)
    assert result.returncode == 1, result.stderr
    why = result.stderr.strip().splitlines()[-1]
    assert name in why and ("cannot be opened as a video" in why or "truncated" in why), result.stderr
    assert "Traceback" not in result.stderr
    assert leftovers(tmp_path) == []
    assert threading.active_count() == threads  # the decoder's failure stopped the encoder too


def test_ctrl_c_in_the_middle_leaves_nothing(checkpoint, tmp_path, monkeypatch):
    """KeyboardInterrupt after the first batch, as Ctrl-C would raise it in
    the network's thread: exit 130, no file, no temporary file, no thread."""
    path, _ = checkpoint
    clip = make_clip(tmp_path / "clip.mp4", frames=12)

    def interrupt(done: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(video, "after_batch", interrupt)
    before = threading.active_count()
    result = run_cli("upscale", clip, "-k", path, "--batch", "2", "--compare", *CPU)
    assert result.returncode == 130, result.stderr  # typer turns KeyboardInterrupt into exit status 130
    assert leftovers(tmp_path) == []
    assert threading.active_count() == before


def test_without_pyav_one_line_says_how_to_install_it(checkpoint, tmp_path, monkeypatch):
    path, _ = checkpoint
    clip = make_clip(tmp_path / "clip.mp4", frames=2, sound=False)
    monkeypatch.setitem(sys.modules, "av", None)  # what `import av` meets when PyAV is not installed
    result = run_cli("upscale", clip, "-k", path, *CPU)
    assert result.returncode == 2 and "pip install 'srgan[video]'" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- sizes ------------------------------------------------------------------


def test_output_sizes_are_even_for_yuv420p():
    assert video.output_size(63, 47, 4, None) == (252, 188)
    assert video.output_size(64, 48, 4, 2.5) == (160, 120)
    assert video.output_size(63, 47, 4, 2.3) == (144, 108)  # 144.9 x 108.1: 145 rounded down to even
    assert video.output_size(63, 47, 3, None) == (188, 140)  # compact x3: 189 x 141 rounded down to even
    assert video.output_size(63, 48, 1, None) == (62, 48)  # x1 (rrdb, compact)


def test_frames_per_forward_keeps_to_the_budget():
    g = random_generator(4, 1, 8)
    assert video.frames_per_forward(g, CPU32, 48, 64, None, 10, 4) == (4, 0)
    assert video.frames_per_forward(g, CPU32, 48, 64, 0, 10, 4) == (4, 0)
    assert video.frames_per_forward(g, CPU32, 48, 64, 32, 10, 4) == (1, 32)
    batch, tile = video.frames_per_forward(g, CPU32, 8000, 8000, None, 10, 4)
    assert batch == 1 and 0 < tile < 8000
