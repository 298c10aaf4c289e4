"""Memory is bounded by what the user asked for, never by what a file
claims: image headers, checkpoint configs, output sizes; and running out of
memory on one image is that image's failure."""

from __future__ import annotations

import resource
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import assert_refused, set_args, skimage_photo, tiny_overrides
from srgan.models import Generator, save_checkpoint


def lying_png(path, width, height, bit_depth=16, colour_type=2):
    """A PNG whose header claims width x height and whose data is a few bytes."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")
    )
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "g.pt"
    torch.manual_seed(0)
    save_checkpoint(
        path,
        {"generator": Generator(4, 1, 8).state_dict(), "config": {"model": {"scale": 4, "blocks": 1, "channels": 8}}},
    )
    return path


def test_a_png_header_claiming_30000x30000_is_refused_before_decoding(checkpoint, tmp_path):
    """Run in a child process to measure its peak memory: the claim would be 5.4 GB of 16-bit RGB."""
    good = tmp_path / "good.png"
    Image.fromarray(skimage_photo("coffee")[:32, :32]).save(good)
    liars = [lying_png(tmp_path / "bomb16.png", 30000, 30000), lying_png(tmp_path / "bomb8.png", 30000, 30000, 8)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    done = subprocess.run(
        [sys.executable, "-m", "srgan.cli", "upscale", good, *liars, "-k", checkpoint, "-o", tmp_path / "out"],
        capture_output=True,
        text=True,
    )
    peak_mb = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    assert_refused(done, "bomb8.png: cannot be decoded as an image (DecompressionBombError", code=1)  # Pillow's check
    assert "bomb16.png: 30000x30000 is 900,000,000 pixels, more than the limit" in done.stderr  # srgan's, for libpng
    assert "2 of 3 images failed" in done.stderr
    assert (tmp_path / "out" / "good_x4.png").is_file()
    assert peak_mb < 2000, peak_mb


def test_lying_images_in_a_training_set_are_skipped(srgan, photo_dir, tmp_path):
    train = tmp_path / "train"
    train.mkdir()
    for name in ("astronaut.png", "coffee.jpg"):
        (train / name).write_bytes((photo_dir / name).read_bytes())
    lying_png(train / "bomb.png", 30000, 30000)
    result = srgan("train", *set_args(tiny_overrides(train, tmp_path / "run")))
    assert result.returncode == 0, result
    assert "skipping" in result.stderr and "bomb.png: cannot be decoded (DecompressionBombError" in result.stderr
    assert_refused(srgan("evaluate", train, "-k", checkpoint_of(tmp_path / "run")), "bomb.png", code=1)


def checkpoint_of(run):
    return run / "checkpoints" / "last.pt"


def test_outputs_that_cannot_fit_in_memory_are_refused_per_file(srgan, checkpoint, tmp_path):
    image = tmp_path / "p.png"
    Image.fromarray(skimage_photo("coffee")[:100, :100]).save(image)
    assert_refused(
        srgan("upscale", image, "-k", checkpoint, "--outscale", "2000", "-o", tmp_path / "out"),
        "the 200000x200000 result needs about",
        code=1,
    )
    assert_refused(
        srgan("bench", "upscale", "--size", "60000x60000", "--set", "model.blocks=1", "--iters", "1"), "--size"
    )


def test_running_out_of_memory_on_one_image_is_its_failure(checkpoint, tmp_path):
    """An address-space limit a little above what the imports take: the
    small image is done, the big one fails on its own, on one line."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import srgan.cli.upscale, srgan.inference.upscale, torch; "
                "print([l for l in open('/proc/self/status') if l.startswith('VmPeak')][0].split()[1])"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    limit = int(probe.stdout) * 1024 + (1 << 30)
    small, big = tmp_path / "small.png", tmp_path / "big.png"
    Image.fromarray(skimage_photo("coffee")[:32, :32]).save(small)
    Image.fromarray(np.array(Image.fromarray(skimage_photo("astronaut")).resize((1500, 1500)))).save(big)

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "srgan.cli",
            "upscale",
            small,
            big,
            "-k",
            checkpoint,
            "-o",
            tmp_path / "out",
            "--outscale",
            "12",
        ],
        capture_output=True,
        text=True,
        preexec_fn=limited,
    )
    assert_refused(done, "big.png: out of memory while upscaling it", code=1)
    assert (tmp_path / "out" / "small_x12.png").is_file() and not (tmp_path / "out" / "big_x12.png").exists()


@pytest.mark.parametrize(
    "model, culprit",
    [
        ({"scale": 4, "blocks": 10**6, "channels": 64}, "model.blocks: expected at most 128"),
        ({"scale": 4, "blocks": 1, "channels": 10**5}, "model.channels: expected at most 512"),
    ],
)
def test_a_checkpoint_cannot_claim_huge_networks(srgan, tmp_path, model, culprit):
    path = tmp_path / "huge.pt"
    torch.save({"generator": {}, "config": {"model": model}}, path)
    image = tmp_path / "p.png"
    Image.fromarray(skimage_photo("coffee")[:32, :32]).save(image)
    assert_refused(srgan("upscale", image, "-k", path), culprit)
