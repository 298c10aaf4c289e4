"""Upscaling an image tile by tile: tiles sized from the network's measured
memory per pixel and the memory at hand (models/memory.py), an
out-of-memory error answered with tiles half the size, and the check that
an upscaled image fits in the memory available at all. The grid and the
pasting of the tiles' outputs: inference/tile_grid.py; the context each
tile reads: inference/tile_pad.py.

The memory a forward takes: the tiler's own work on one probe tile (the
network's forward in inference mode, the runtime's precision and memory
format, and the conversion into the output array), at PROBE_SIDES LR
pixels a side, under models/memory.measure_peak. The peaks fit bytes =
fixed + per_pixel * pixels, cached per architecture and runtime in the
tile pad cache's file (inference/tile_pad.py); a tile's predicted peak may
take MARGIN of the memory at hand. Without /proc (not Linux) nothing can be
measured nor known to be at hand: the image runs whole, and an
out-of-memory error halves the tile (docs/upscale.md)."""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from weakref import WeakKeyDictionary

import numpy as np
import torch

from srgan.files.errors import SrganError
from srgan.inference.tile_grid import Tile, paste_tiles, tile_grid
from srgan.inference.tile_pad import cache_file, read_cache, tile_pad, write_cache
from srgan.models import Runtime, SRGenerator
from srgan.models.memory import available_bytes, measure_peak, mem_available
from srgan.models.runtime import is_out_of_memory

log = logging.getLogger("srgan")

MIN_TILE = 16  # LR pixels: below this the context dwarfs the tile; the halving stops here
PROBE = "tile memory v1"  # part of the cache key: a changed probe measures again
PROBE_SIDES = (32, 64)  # LR pixels a side (rounded up to the tile alignment): two points fix a line
MARGIN = 0.7  # the share of the memory at hand a tile's predicted peak may take (the rest: allocator slack)

_measured: WeakKeyDictionary[torch.nn.Module, dict[str, TileMemory]] = WeakKeyDictionary()


class OutOfMemoryAtFloor(SrganError):
    """Out of memory with the smallest tile: the caller names the image."""


@dataclass(frozen=True)
class TileMemory:
    """A tile's peak bytes as a line in its input pixels (context included),
    and where it came from."""

    fixed: float
    per_pixel: float
    how: str  # "measured" or "cached"

    def peak(self, pixels: int) -> float:
        return self.fixed + self.per_pixel * pixels


def memory_key(network: SRGenerator, runtime: Runtime) -> str:
    """sha256 of what decides a forward's memory: the probe's version, the
    network's class, arch, scale and every tensor's name, dtype and shape
    (not its values, which change no allocation: a run's validations share
    one entry), and the runtime's device, precision, memory format and torch
    version."""
    device = runtime.device.type
    if device == "cuda":
        device += f" {torch.cuda.get_device_name(runtime.device)}"
    head = (
        f"{PROBE}\n{type(network).__name__}\n{network.arch}\n{network.scale}\n{device}\n{runtime.precision}\n"
        f"{runtime.channels_last}\n{torch.__version__}\n"
    )
    digest = hashlib.sha256(head.encode())
    for name, tensor in network.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
    return "memory " + digest.hexdigest()


def tile_memory(network: SRGenerator, runtime: Runtime) -> TileMemory | None:
    """The network's measured memory per tile (cached per architecture and
    runtime: memory_key); None where the peak cannot be measured (no /proc)
    or the probe itself runs out of memory."""
    key = memory_key(network, runtime)
    known = _measured.setdefault(network, {})
    if key in known:
        return known[key]
    path = cache_file()
    entries = read_cache(path)
    entry = entries.get(key) or {}
    fixed, per_pixel = entry.get("fixed"), entry.get("per_pixel")
    if all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in (fixed, per_pixel)):
        known[key] = TileMemory(float(fixed), float(per_pixel), "cached")  # type: ignore[arg-type]
        return known[key]
    measured = measure_tile_memory(network, runtime)
    if measured is None:
        return None
    entries.pop(key, None)
    entries[key] = {"fixed": measured.fixed, "per_pixel": measured.per_pixel, "arch": network.arch}
    write_cache(path, entries)
    known[key] = measured
    return measured


def measure_tile_memory(network: SRGenerator, runtime: Runtime) -> TileMemory | None:
    """The tiler's peak on PROBE_SIDES tiles of noise, fitted to a line;
    None where a peak cannot be read or the probe runs out of memory."""
    align = network.tile_align
    points = []
    generator = torch.Generator().manual_seed(0)
    for side in (-(-s // align) * align for s in PROBE_SIDES):
        image = torch.rand(3, side, side, generator=generator)
        out = np.full((side * network.scale, side * network.scale, 3), 0, np.uint8)  # touched: resident before
        grid = [Tile(0, side, 0, side, 0, side, 0, side)]
        try:
            with torch.inference_mode():
                paste_tiles(network, image, runtime, out, grid, None)  # once unmeasured: threads, kernels, caches
                _, peak = measure_peak(runtime.device, partial(paste_tiles, network, image, runtime, out, grid, None))
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
            peak = None
        if peak is None:
            return None
        points.append((side * side, peak))
    (n1, p1), (n2, p2) = points
    per_pixel = (p2 - p1) / (n2 - n1)
    if per_pixel <= 0:  # the smaller probe's peak lost in the allocator's reuse: a line through the larger one
        return TileMemory(0.0, p2 / n2, "measured")
    return TileMemory(max(0.0, p1 - per_pixel * n1), per_pixel, "measured")


def frames_that_fit(generator: SRGenerator, runtime: Runtime, height: int, width: int, most: int) -> int:
    """How many whole images of this size, at most `most`, one forward's
    predicted peak fits MARGIN of the memory at hand for (0: not even one);
    `most` where nothing can be measured."""
    memory = tile_memory(generator, runtime)
    available = available_bytes(runtime.device)  # after the probe: its threads and caches are counted
    if memory is None or available is None:
        return most
    room = available * MARGIN - memory.fixed
    return max(0, min(most, int(room // max(memory.per_pixel * height * width, 1.0))))


def plan_tile(
    generator: SRGenerator, runtime: Runtime, height: int, width: int, pad: int, frames: int = 1
) -> tuple[int, str]:
    """(tile, why): 0 (the whole image) when `frames` whole images' predicted
    peak fits MARGIN of the memory at hand, else the largest tile whose
    predicted peak with its context does, at least the floor; and the reason
    in words, for the log. Where nothing can be measured: 0."""
    memory = tile_memory(generator, runtime)
    available = available_bytes(runtime.device)  # after the probe: its threads and caches are counted
    if memory is None or available is None:
        return 0, "the whole image (memory not measurable here; an out-of-memory error halves the tile)"
    budget = available * MARGIN
    gib = f"{available / 2**30:.2f} GiB at hand"
    if memory.fixed + frames * memory.per_pixel * height * width <= budget:
        return 0, f"the whole image (predicted peak {memory.peak(height * width) / 2**30:.2f} GiB of {gib})"
    side = math.isqrt(max(0, int((budget - memory.fixed) / max(memory.per_pixel, 1e-9))))
    align = generator.tile_align
    tile = max(floor_tile(generator), (side - 2 * pad) // align * align)
    peak = memory.peak(min(height, tile + 2 * pad) * min(width, tile + 2 * pad))
    return tile, f"tiles of {tile} (predicted peak {peak / 2**30:.2f} GiB of {gib})"


def floor_tile(generator: SRGenerator) -> int:
    """The smallest tile the halving tries: MIN_TILE, on the alignment's grid."""
    align = generator.tile_align
    return -(-MIN_TILE // align) * align


def check_upscale_memory(
    source: Path | str, width: int, height: int, itemsize: int, scale: int, outscale: float | None
) -> None:
    """Raise SrganError for an image whose upscaled arrays would not fit in the
    memory the system has available, before they are allocated: the output is
    held whole (4000x3000 at x4 is 576 MB of RGB, --outscale 2000 would be
    terabytes). Without /proc/meminfo it checks nothing."""
    available = mem_available()
    if available is None:
        return
    needed = width * height * 3 * 4  # the input as float32
    needed += width * height * scale**2 * 4 * itemsize  # the network's output (RGB + alpha)
    if outscale is not None and outscale != scale:
        needed += round(width * outscale) * round(height * outscale) * 4 * itemsize  # the resized copy
    if needed > 0.8 * available:
        final = outscale or scale
        raise SrganError(
            f"{source}: the {round(width * final)}x{round(height * final)} result needs about {needed / 2**30:.1f} GiB "
            f"of memory, more than the {available / 2**30:.1f} GiB available (use a smaller --outscale, "
            "or cut the image into parts)"
        )


def auto_tile(generator: SRGenerator, runtime: Runtime, height: int, width: int, pad: int) -> int:
    """The largest tile whose measured peak (with its context) fits the
    memory at hand; 0 (no tiling) when the whole image fits (plan_tile)."""
    tile, why = plan_tile(generator, runtime, height, width, pad)
    log.log(logging.INFO if tile else logging.DEBUG, "%dx%d: %s", width, height, why)  # one line per tiled image
    return tile


def needs_tiles(generator: SRGenerator, runtime: Runtime, height: int, width: int, tile: int | None) -> bool:
    """Whether an image of this size runs in more than one tile (`tile` None:
    planned from the measured memory), so that the tiles' context matters."""
    if tile is None:
        return plan_tile(generator, runtime, height, width, 0)[0] > 0
    return 0 < tile < max(height, width)


@torch.inference_mode()
def upscale_tiled(
    generator: SRGenerator,
    image: torch.Tensor,
    runtime: Runtime,
    out: np.ndarray,
    tile: int,
    pad: int | None,
    progress: str | None = None,
) -> None:
    """Upscale `image` (3xHxW, values in [0, 1], on the CPU) into `out`
    ((sH)x(sW)x3, or (sH)x(sW) for grayscale; uint8, uint16 or float32).

    An out-of-memory error (models/runtime.is_out_of_memory: CUDA's, the CPU
    allocator's, MemoryError) halves the tile and tiles the whole image again
    into `out`, saying so in one line: every tile of the new grid is written,
    so the result is the one a run started at the halved tile gives.
    `progress` names a bar over the tiles when there are several. `pad`
    None: the image was meant to run whole, and the pad is measured
    (inference/tile_pad.py) only if memory makes it run in tiles. Raises
    ValueError when `out` has the wrong size, and OutOfMemoryAtFloor (an
    SrganError) when memory runs out even with the floor's tiles."""
    height, width = image.shape[1:]
    scale = generator.scale
    if out.shape[:2] != (height * scale, width * scale):
        raise ValueError(f"out is {out.shape[:2]}, expected {(height * scale, width * scale)}")
    floor, align = floor_tile(generator), generator.tile_align
    while True:
        try:
            grid = tile_grid(height, width, tile, pad or 0, align)
            paste_tiles(generator, image, runtime, out, grid, progress)
            return
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
            current = min(tile, max(height, width)) if tile > 0 else max(height, width)
            if current <= floor:
                available = available_bytes(runtime.device)
                at_hand = "" if available is None else f", {available / 2**30:.2f} GiB at hand"
                raise OutOfMemoryAtFloor(
                    f"out of memory even with {current} px tiles on {runtime.device.type}{at_hand}"
                    + (" (try --device cpu)" if runtime.device.type == "cuda" else "")
                ) from None
        # Outside the except block, so that the failed attempt's tensors are released first.
        if runtime.device.type == "cuda":
            torch.cuda.empty_cache()
        whole = tile <= 0 or tile >= max(height, width)
        tile = max(floor, current // 2 // align * align)
        if pad is None:
            pad = tile_pad(generator, runtime).pad
        at = f"the whole {width}x{height} image" if whole else f"tile {current}"
        log.warning("out of memory at %s: tiles of %d from here", at, tile)
