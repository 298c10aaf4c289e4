"""`--tile auto` from the network's measured memory, and tiles halved on an
out-of-memory error, for real: a child `srgan upscale` under RLIMIT_AS, and
a network written here that raises the CPU allocator's error."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import bare_checkpoint, run_cli, skimage_photo
from srgan.inference.options import UpscaleOptions
from srgan.inference.tiles import MARGIN, floor_tile, plan_tile, tile_memory
from srgan.inference.upscale import inference_network, upscale_files, upscale_pixels
from srgan.models import Generator, Runtime
from srgan.models.memory import available_bytes, measure_peak
from srgan.models.runtime import is_out_of_memory

pytestmark = pytest.mark.own_cache  # what a cache holds and when it measures is the subject

CPU32 = Runtime(torch.device("cpu"), "fp32")
ALLOCATOR = "DefaultCPUAllocator: can't allocate memory: you tried to allocate {} bytes. Error code 12"

# The child: `srgan upscale` run once on a small crop with no limit (its imports,
# threads, caches, the measured tile pad and memory), then the address-space
# limit set to leave `room` bytes, then the command itself.
CHILD = textwrap.dedent(
    """
    import resource, sys
    from srgan.cli.app import main
    from srgan.models.memory import status_bytes
    room, warm, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    try:
        main([args[0], warm, "-o", warm + ".out.png", *args[4:], "--tile", "16"])
    except SystemExit as done:
        assert not done.code, done.code
    resource.setrlimit(resource.RLIMIT_AS, (status_bytes("VmSize") + room, resource.RLIM_INFINITY))
    main(args)
    """
)


def photo(height: int, width: int) -> np.ndarray:
    return np.ascontiguousarray(skimage_photo("astronaut")[:height, :width])


class AllocatorLimit(torch.nn.Module):
    """A generator on a machine with room for `pixels` input pixels a
    forward: a larger input raises the error torch's CPU allocator raises."""

    def __init__(self, generator: torch.nn.Module, pixels: int):
        super().__init__()
        self.generator, self.pixels = generator, pixels
        self.scale, self.receptive_radius = generator.scale, generator.receptive_radius
        self.arch, self.tile_align = generator.arch, generator.tile_align

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2] * x.shape[-1] > self.pixels:
            raise RuntimeError(ALLOCATOR.format(x.numel() * 4 * 1000))
        return self.generator(x)


def test_auto_tile_fits_the_measured_peak_in_the_memory_at_hand():
    torch.manual_seed(0)
    network = inference_network(Generator(4, 1, 8), CPU32)
    memory = tile_memory(network, CPU32)
    assert memory is not None and memory.how == "measured" and memory.per_pixel > 0
    assert plan_tile(network, CPU32, 64, 64, 8)[0] == 0  # a small image runs whole
    # a photo too large for the machine: the largest tile (with its context) whose predicted peak fits
    side = int((available_bytes(CPU32.device) / memory.per_pixel) ** 0.5) * 2
    tile, why = plan_tile(network, CPU32, side, side, 8)
    budget = available_bytes(CPU32.device) * MARGIN
    assert floor_tile(network) <= tile < side and "tiles of" in why
    assert memory.peak((tile + 16) ** 2) <= budget < memory.peak((tile + 16 + 8) ** 2)
    # cached by architecture, not weights: other weights of the same shapes reuse the measurement
    other = inference_network(Generator(4, 1, 8), CPU32)
    assert tile_memory(other, CPU32).how == "cached"  # type: ignore[union-attr]
    assert tile_memory(inference_network(Generator(4, 1, 16), CPU32), CPU32).how == "measured"  # type: ignore[union-attr]


def test_an_allocator_error_halves_the_tile_and_equals_a_run_at_the_half(caplog):
    """80x96 LR, room for 2000 input pixels: 64 px tiles (cells of 40x48
    and their pad) fail, 32 px tiles fit; the output is the 32 px run's."""
    torch.manual_seed(0)
    network = inference_network(Generator(4, 1, 8), CPU32)
    image = photo(80, 96)
    with caplog.at_level(logging.WARNING, logger="srgan"):
        out = upscale_pixels(AllocatorLimit(network, 2000), image, CPU32, tile=64, pad=4)
    assert [r.getMessage() for r in caplog.records] == ["out of memory at tile 64: tiles of 32 from here"]
    assert np.array_equal(out, upscale_pixels(network, image, CPU32, tile=32, pad=4))


class Broken(torch.nn.Module):
    """A generator whose forward fails with an error that is not about memory."""

    scale, receptive_radius, arch, tile_align = 4, 4, "srresnet", 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("Given groups=1, weight of size [8, 3, 9, 9], expected input to have 3 channels")


def test_only_memory_errors_are_retried():
    assert is_out_of_memory(RuntimeError(ALLOCATOR.format(1 << 30)))
    assert is_out_of_memory(RuntimeError("could not create a primitive"))  # oneDNN under RLIMIT_AS
    assert not is_out_of_memory(RuntimeError("could not create a primitive descriptor for a convolution forward"))
    with pytest.raises(RuntimeError, match="expected input to have 3 channels"):
        upscale_pixels(Broken(), photo(40, 40), CPU32, tile=32, pad=4)  # type: ignore[arg-type]


def test_out_of_memory_at_the_floor_fails_that_image_alone_in_one_line(tmp_path):
    torch.manual_seed(0)
    small = AllocatorLimit(Generator(4, 1, 8).eval(), 100)  # room for a 10x10 input: the probe fails too
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    Image.fromarray(photo(80, 96)).save(src / "big.png")
    Image.fromarray(photo(8, 8)).save(src / "tiny.png")
    report = upscale_files(small, CPU32, [src], out, UpscaleOptions(tile_pad=2))
    assert report.written == [out / "tiny_x4.png"]
    [(source, why)] = report.failed
    assert source == src / "big.png" and "\n" not in why
    floor = floor_tile(small)
    assert re.fullmatch(rf".*big\.png: out of memory even with {floor} px tiles on cpu, [0-9.]+ GiB at hand", why)
    assert sorted(p.name for p in out.iterdir()) == ["tiny_x4.png"]  # nothing partial left for big.png


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
def test_upscale_under_an_address_space_limit_plans_tiles_and_equals_that_tile(tmp_path):
    """A child `srgan upscale` with room for half the photo's whole-image
    peak: it plans tiles, finishes, and writes the bytes `--tile N` writes."""
    torch.manual_seed(0)
    generator = Generator(4, 1, 8)
    checkpoint = bare_checkpoint(tmp_path / "tiny.pt", generator)
    image = photo(256, 256)
    Image.fromarray(image).save(tmp_path / "photo.png")
    Image.fromarray(image[:48, :48]).save(tmp_path / "crop.png")
    network = inference_network(generator, CPU32)
    upscale_pixels(network, image, CPU32, tile=0, pad=0)  # warm: the measurement below is the forward's own
    _, whole = measure_peak(CPU32.device, lambda: upscale_pixels(network, image, CPU32, tile=0, pad=0))
    assert whole is not None
    room = whole // 2  # the whole image cannot run in it
    args = ["upscale", tmp_path / "photo.png", "-o", tmp_path / "auto.png", "--checkpoint", checkpoint]
    args += ["--device", "cpu", "--precision", "fp32"]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(room), str(tmp_path / "crop.png"), *map(str, args)],
        capture_output=True,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="2"),
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    planned = re.search(r"256x256: tiles of (\d+) \(predicted peak", child.stderr)
    assert planned, child.stderr
    assert "out of memory" not in child.stderr  # the plan fitted: no retry needed
    tile = int(planned.group(1))
    pinned = run_cli(*args[:3], tmp_path / "pinned.png", *args[4:], "--tile", tile)
    assert pinned.returncode == 0, pinned.stderr
    assert (tmp_path / "auto.png").read_bytes() == (tmp_path / "pinned.png").read_bytes()
