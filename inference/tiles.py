"""Upscaling an image tile by tile: tiles sized to the memory budget (on the
CPU a share of the memory available, on CUDA of the GPU's free memory), and
a CUDA out-of-memory error answered with tiles half the size; and the check
that an upscaled image fits in the memory available at all. The grid and
the pasting of the tiles' outputs: inference/tile_grid.py; the context each
tile reads: inference/tile_pad.py."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch

from srgan.files.errors import SrganError
from srgan.inference.tile_grid import paste_tiles, tile_grid
from srgan.inference.tile_pad import tile_pad
from srgan.models import Runtime, SRGenerator

log = logging.getLogger("srgan")

MIN_TILE = 16  # LR pixels: below this the context dwarfs the tile
CPU_BUDGET = 1536 * 2**20  # activation bytes on the CPU, at most...
CPU_SHARE = 0.25  # ...and at most this share of the memory the system has available
CUDA_SHARE = 0.6  # of the GPU's free memory (the rest: allocator slack, cuDNN workspaces)
ACTIVATION_SAFETY = 1.5  # headroom: the CPU's measured peak exceeds the estimate below (docs/performance.md)


def activation_bytes_per_pixel(generator: SRGenerator, precision: str) -> int:
    """Peak bytes of activations per LR pixel in one forward pass. The last x2
    stage dominates: its conv output and the shuffled copy both hold
    `channels` values per output pixel, scale**2 output pixels per LR pixel."""
    element = 4 if precision == "fp32" else 2  # autocast keeps conv outputs in bf16/fp16
    return math.ceil(2 * generator.channels * generator.scale**2 * element * ACTIVATION_SAFETY)


def activation_budget(device: torch.device) -> int:
    """Bytes the activations of one tile may take on `device`."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * CUDA_SHARE)
    available = available_ram()
    return CPU_BUDGET if available is None else min(CPU_BUDGET, int(available * CPU_SHARE))


def available_ram() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_upscale_memory(
    source: Path | str, width: int, height: int, itemsize: int, scale: int, outscale: float | None
) -> None:
    """Raise SrganError for an image whose upscaled arrays would not fit in the
    memory the system has available, before they are allocated: the output is
    held whole (4000x3000 at x4 is 576 MB of RGB, --outscale 2000 would be
    terabytes). Without /proc/meminfo it checks nothing."""
    available = available_ram()
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


def fits_whole(generator: SRGenerator, runtime: Runtime, height: int, width: int) -> bool:
    """Whether the whole image's forward pass fits the memory budget."""
    per_pixel = activation_bytes_per_pixel(generator, runtime.precision)
    return height * width * per_pixel <= activation_budget(runtime.device)


def auto_tile(generator: SRGenerator, runtime: Runtime, height: int, width: int, pad: int) -> int:
    """The largest tile whose forward pass (with its context) fits the memory
    budget; 0 (no tiling) when the whole image fits."""
    if fits_whole(generator, runtime, height, width):
        return 0
    per_pixel = activation_bytes_per_pixel(generator, runtime.precision)
    return max(MIN_TILE, math.isqrt(activation_budget(runtime.device) // per_pixel) - 2 * pad)


def needs_tiles(generator: SRGenerator, runtime: Runtime, height: int, width: int, tile: int | None) -> bool:
    """Whether an image of this size runs in more than one tile (`tile` None:
    sized to the memory budget), so that the tiles' context matters."""
    if tile is None:
        return not fits_whole(generator, runtime, height, width)
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

    A CUDA out-of-memory error halves the tile and starts the image again,
    saying so; `progress` names a bar over the tiles when there are several.
    `pad` None: the image was meant to run whole, and the pad is measured
    (inference/tile_pad.py) only if memory makes it run in tiles. Raises
    ValueError when `out` has the wrong size, and SrganError when CUDA runs
    out of memory even with MIN_TILE tiles."""
    height, width = image.shape[1:]
    scale = generator.scale
    if out.shape[:2] != (height * scale, width * scale):
        raise ValueError(f"out is {out.shape[:2]}, expected {(height * scale, width * scale)}")
    while True:
        try:
            grid = tile_grid(height, width, tile, pad or 0, generator.tile_align)
            paste_tiles(generator, image, runtime, out, grid, progress)
            return
        except torch.cuda.OutOfMemoryError:
            current = min(tile, max(height, width)) if tile > 0 else max(height, width)
            if current <= MIN_TILE:
                raise SrganError(f"CUDA out of memory even with {current} px tiles (try --device cpu)") from None
        # Outside the except block, so that the failed attempt's tensors are released first.
        torch.cuda.empty_cache()
        tile = max(MIN_TILE, current // 2)
        if pad is None:
            pad = tile_pad(generator, runtime).pad
        log.warning("CUDA out of memory with %d px tiles: retrying with --tile %d", current, tile)
