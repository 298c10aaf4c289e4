"""Hostile inputs, round 3: two `srgan prepare` racing for one name, names
with glob characters, forged prepared indexes, a SIGTERM in a video upscale,
video frames over the pixel limit, `srgan evaluate` of one photo and of a
name with a newline."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from PIL import Image

from conftest import assert_refused, bare_checkpoint, no_temporary_files, set_args, skimage_photo, tiny_overrides
from srgan.data import PreparedImages
from srgan.files.errors import SrganError

CPU = ("--device", "cpu", "--precision", "fp32")
# No process has this id (Linux's pid_max is at most 2**22): a temporary of a dead prepare.
DEAD_PID = 2**31 - 2


def start(*args: str) -> subprocess.Popen:
    """`srgan ARGS` in a process of its own, not waited for."""
    return subprocess.Popen(
        [sys.executable, "-m", "srgan.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "g.pt"
    bare_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """Enough photos that a prepare takes a moment: two started together overlap."""
    folder = tmp_path_factory.mktemp("source")
    photo = skimage_photo("astronaut")
    for n in range(24):
        Image.fromarray(np.roll(photo, 5 * n, axis=1)).save(folder / f"{n:02d}.png", compress_level=1)
    return folder


@pytest.fixture(scope="module")
def prepared(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared") / "set.prepared"
    result = subprocess.run(
        [sys.executable, "-m", "srgan.cli", "prepare", str(source), "-o", str(out)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return out


# --- srgan prepare ------------------------------------------------------------


def test_two_prepares_started_together_one_wins_the_other_is_refused(source, tmp_path):
    out = tmp_path / "set.prepared"
    racers = [start("prepare", source, "-o", out, "--workers", "1") for _ in range(2)]
    results = [(*p.communicate(timeout=300), p.returncode) for p in racers]
    codes = sorted(code for _, _, code in results)
    assert codes == [0, 2], results
    loser = next(subprocess.CompletedProcess([], code, out_, err) for out_, err, code in results if code == 2)
    assert_refused(loser, "exists")
    assert loser.stderr.count("srgan: error") == 1, loser.stderr
    images = PreparedImages(out)  # the winner's dataset, whole
    assert len(images) == 24 and images.image(23).shape == (512, 512, 3)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary folder left by either


@pytest.mark.parametrize("renameat2", [True, False])
def test_the_final_rename_never_replaces_even_an_empty_folder(tmp_path, monkeypatch, renameat2):
    """Linux renames a folder onto an empty one: the step that gives a
    dataset its name must not, with renameat2 or without it (mkdir's claim)."""
    from srgan.files import atomic

    if not renameat2:

        def no_libc(*args, **kwargs):
            raise OSError("no C library here")

        monkeypatch.setattr(atomic.ctypes, "CDLL", no_libc)
    built = tmp_path / "built"
    built.mkdir()
    (built / "index.json").write_text("{}")
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError):
        atomic.rename_no_replace(built, tmp_path / "taken")
    assert (built / "index.json").exists() and not any((tmp_path / "taken").iterdir())
    atomic.rename_no_replace(built, tmp_path / "free")
    assert (tmp_path / "free" / "index.json").read_text() == "{}" and not built.exists()


def test_a_name_with_glob_characters_sweeps_only_its_own_temporaries(srgan, source, tmp_path):
    folder = tmp_path / "pp"
    folder.mkdir()
    # another dataset's folder left by a killed prepare: `*` must not match it
    other = folder / f".x.{DEAD_PID}.deadbeef.tmp"
    other.mkdir()
    (other / "pixels.u8").write_bytes(b"theirs")
    mine = folder / f".*.{DEAD_PID}.0badcafe.tmp"  # the same name's: swept
    mine.mkdir()
    one = tmp_path / "one"
    one.mkdir()
    Image.open(source / "00.png").save(one / "00.png")
    result = srgan("prepare", one, "-o", folder / "*")
    assert result.returncode == 0, result
    assert len(PreparedImages(folder / "*")) == 1
    assert (other / "pixels.u8").read_bytes() == b"theirs"
    assert not mine.exists()


def copy_of(prepared, tmp_path):
    copy = tmp_path / "copy.prepared"
    copy.mkdir()
    for name in ("index.json", "pixels.u8"):
        (copy / name).write_bytes((prepared / name).read_bytes())
    return copy


def forge_many_entries(copy):
    """200,000 entries, every one the first image: 200,000 images claimed from one's pixels."""
    index = json.loads((copy / "index.json").read_text())
    index["images"] = index["images"][:1] * 200_000
    (copy / "index.json").write_text(json.dumps(index))


def nest_deep(copy):
    (copy / "index.json").write_text("[" * 100_000 + "]" * 100_000)


def make_fifo(copy):
    (copy / "index.json").unlink()
    os.mkfifo(copy / "index.json")


def link_to_dev_zero(copy):
    (copy / "index.json").unlink()
    (copy / "index.json").symlink_to("/dev/zero")


def make_huge(copy):
    with open(copy / "index.json", "r+b") as f:
        f.truncate(2**32)  # sparse: 4 GiB that cost no disk


@pytest.mark.parametrize(
    "forge, culprit",
    [
        (forge_many_entries, "image 1 overlaps image 0"),
        (nest_deep, "not a readable index (nested too deeply)"),
        (make_fifo, "not a regular file"),
        (link_to_dev_zero, "not a regular file"),
        (make_huge, "a prepared dataset's index is at most"),
    ],
)
def test_a_forged_index_is_refused_in_one_line(srgan, prepared, tmp_path, forge, culprit):
    copy = copy_of(prepared, tmp_path)
    forge(copy)
    result = srgan("train", *set_args(tiny_overrides(copy, tmp_path / "run")))
    assert_refused(result, culprit)
    assert "copy.prepared" in result.stderr.strip().splitlines()[-1] and not (tmp_path / "run").exists()
    with pytest.raises(SrganError, match=re.escape(culprit)):
        PreparedImages(copy)


# --- srgan upscale of a video -------------------------------------------------


@pytest.fixture
def clip(tmp_path):
    """An H.264 clip of `frames` frames of width x height (a pan over a photo), no sound."""
    pytest.importorskip("av")
    from srgan.bench.video import panning_frames, write_clip

    def make(frames: int, width: int = 64, height: int = 48):
        frames = panning_frames(skimage_photo("astronaut"), width, height, frames)
        return write_clip(tmp_path / "clip.mp4", frames, sound=False)

    return make


def test_sigterm_in_a_video_upscale_leaves_no_temporary_file(checkpoint, clip, tmp_path):
    path = clip(40, 160, 120)  # a few seconds' work
    process = start("upscale", path, "-k", checkpoint, "--compare", "--batch", "1", *CPU)
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None and not no_temporary_files(tmp_path):
        time.sleep(0.01)
    # It was writing when the signal came. (FFmpeg creates the file at the first
    # packet, once x264's lookahead is full: here while the encoder flushes.)
    assert no_temporary_files(tmp_path), process.communicate()
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "srgan: terminated", stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_an_interrupt_while_the_encoder_flushes_waits_for_it():
    """Ctrl-C or SIGTERM while the calling thread waits for the encoder's last
    frames: the encoder ends before the interrupt goes on to close its file
    (closed under it, FFmpeg crashed: exit -11)."""
    from srgan.inference import video

    job = video._Job(1, take_turns=False)
    ended = []
    encoder = video._Worker("encoder", lambda: (time.sleep(1), ended.append(True)), job)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            job.run([encoder], lambda: None)  # the work is done: it waits for the encoder
        assert ended == [True] and not encoder.is_alive()
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


def test_video_frames_over_the_pixel_limit_are_refused_before_decoding(srgan, checkpoint, clip, tmp_path, monkeypatch):
    """The image limit, lowered below 64x48 (a clip of frames over the real
    limit would cost gigabytes to make): no frame reaches the network."""
    from srgan.data import images
    from srgan.inference import video

    path = clip(4)
    monkeypatch.setattr(images, "MAX_IMAGE_PIXELS", 64 * 48 - 1)

    def no_batch(done: int) -> None:
        raise AssertionError("a frame was upscaled")

    monkeypatch.setattr(video, "after_batch", no_batch)
    result = srgan("upscale", path, "-k", checkpoint, *CPU)
    assert_refused(result, "64x48 is 3,072 pixels, more than the limit of 3,071", code=1)
    assert "clip.mp4" in result.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


# --- srgan evaluate -----------------------------------------------------------


def test_evaluate_scores_one_photo(srgan, checkpoint, tmp_path):
    photo = tmp_path / "cup.png"
    Image.fromarray(skimage_photo("coffee")[:96, :128]).save(photo)
    result = srgan("evaluate", photo, "-k", checkpoint, "--json", tmp_path / "scores.json", *CPU)
    assert result.returncode == 0, result
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert [im["name"] for im in scores["images"]] == ["cup"] and scores["folders"] == []
    assert scores["mean"]["bicubic"]["psnr"] == scores["images"][0]["bicubic"]["psnr"]
    assert any(line.startswith("cup ") for line in result.stdout.splitlines())
    # a photo and a folder: the folder gets its mean, the photo counts in the overall one
    folder = tmp_path / "set"
    folder.mkdir()
    Image.fromarray(skimage_photo("chelsea")[:96, :96]).save(folder / "cat.png")
    both = srgan("evaluate", photo, folder, "-k", checkpoint, *CPU)
    assert both.returncode == 0, both
    assert "set mean" in both.stdout and "cup" in both.stdout
    assert_refused(
        srgan("evaluate", tmp_path / "scores.json", "-k", checkpoint, *CPU),
        "scores.json: not an image (expected a folder of images or an image file",
    )
    assert_refused(srgan("evaluate", tmp_path / "none.png", "-k", checkpoint, *CPU), "none.png: no such file or folder")


def test_a_name_with_a_newline_keeps_the_evaluate_table_one_row_an_image(srgan, checkpoint, tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    Image.fromarray(skimage_photo("coffee")[:96, :128]).save(folder / "two\nlines.png")
    Image.fromarray(skimage_photo("chelsea")[:96, :96]).save(folder / "cat.png")
    result = srgan("evaluate", folder, "-k", checkpoint, *CPU)
    assert result.returncode == 0, result
    lines = result.stdout.splitlines()
    assert len(lines) == 2 + 2 + 1 + 1 + 1  # title, header, 2 images, rule, mean, worst gain
    assert any(line.startswith("two\\nlines ") for line in lines), result.stdout
    assert len({len(line) for line in lines[1:6]}) == 1  # the columns line up
