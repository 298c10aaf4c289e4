"""Running a generator over an image tile by tile.

Each tile reads its own cells plus `pad` LR pixels of context on every side
(clipped at the image border, where the whole-image forward sees the convs'
zero padding too) and keeps only the output of its own cells. With `pad` at
least the generator's receptive radius every kept output pixel saw exactly
the input the whole-image forward would have shown it: no seams. Below it,
how large the seams are depends on the weights: the pad is measured on the
network (inference/tile_pad.py, docs/tiling.md). Peak memory is set by the
tile; the output is a preallocated integer array that each tile is
converted into as it is pasted.
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from numpy.typing import DTypeLike
from tqdm import tqdm

from srgan.files.errors import SrganError
from srgan.models import Runtime, SRGenerator

log = logging.getLogger("srgan")

MIN_TILE = 16  # LR pixels: below this the context dwarfs the tile
CPU_BUDGET = 1536 * 2**20  # activation bytes on the CPU, at most...
CPU_SHARE = 0.25  # ...and at most this share of the memory the system has available
CUDA_SHARE = 0.6  # of the GPU's free memory (the rest: allocator slack, cuDNN workspaces)
ACTIVATION_SAFETY = 1.5  # measured peak / the estimate below is 1.2-1.4 on CPU
LUMA = (0.299, 0.587, 0.114)  # BT.601, to bring a grayscale image back to one channel


@dataclass(frozen=True)
class Tile:
    """One cell of the grid, in LR pixels: rows top:bottom and columns
    left:right are its own; the context rows/columns are what it reads."""

    top: int
    bottom: int
    left: int
    right: int
    context_top: int
    context_bottom: int
    context_left: int
    context_right: int


def tile_grid(height: int, width: int, tile: int, pad: int, align: int = 1) -> list[Tile]:
    """Near-equal cells of about `tile` pixels a side covering the image
    once (0: one cell, the whole image), each with up to `pad` pixels of
    context. Cells and contexts start on multiples of `align`: a generator
    that pixel-unshuffles its input (rrdb x1, x2) then groups a tile's pixels
    as it groups the whole image's."""

    def spans(size: int) -> list[tuple[int, int]]:
        count = 1 if tile <= 0 else math.ceil(size / tile)
        edges = sorted({min(size, align * round(i * size / count / align)) for i in range(count)} | {size})
        return list(zip(edges[:-1], edges[1:], strict=True))

    def start(edge: int) -> int:
        return max(0, edge - pad) // align * align

    return [
        Tile(top, bottom, left, right, start(top), min(height, bottom + pad), start(left), min(width, right + pad))
        for top, bottom in spans(height)
        for left, right in spans(width)
    ]


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


def to_output_pixels(sr: torch.Tensor, dtype: DTypeLike, gray: bool) -> np.ndarray:
    """1x3xHxW in [0, 1] -> HxWx3 (or HxW luma when `gray`) of `dtype`:
    uint8 and uint16 rounded to their full range, float32 as it is."""
    sr = sr[0].float().clamp(0, 1)
    if gray:
        sr = torch.tensordot(sr.new_tensor(LUMA), sr, dims=1)
    else:
        sr = sr.permute(1, 2, 0)
    if dtype == np.float32:
        return sr.cpu().numpy()
    peak = np.iinfo(dtype).max
    return sr.mul(peak).round().to(torch.int32).cpu().numpy().astype(dtype)


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
    (inference/tile_pad.py) only if memory makes it run in tiles."""
    height, width = image.shape[1:]
    scale = generator.scale
    if out.shape[:2] != (height * scale, width * scale):
        raise ValueError(f"out is {out.shape[:2]}, expected {(height * scale, width * scale)}")
    while True:
        try:
            grid = tile_grid(height, width, tile, pad or 0, generator.tile_align)
            _paste_tiles(generator, image, runtime, out, grid, progress)
            return
        except torch.cuda.OutOfMemoryError:
            current = min(tile, max(height, width)) if tile > 0 else max(height, width)
            if current <= MIN_TILE:
                raise SrganError(f"CUDA out of memory even with {current} px tiles (try --device cpu)") from None
        # Outside the except block, so that the failed attempt's tensors are released first.
        torch.cuda.empty_cache()
        tile = max(MIN_TILE, current // 2)
        if pad is None:
            from srgan.inference.tile_pad import tile_pad  # here: the probe upscales with this module's tiler

            pad = tile_pad(generator, runtime).pad
        log.warning("CUDA out of memory with %d px tiles: retrying with --tile %d", current, tile)


def _paste_tiles(
    generator: SRGenerator,
    image: torch.Tensor,
    runtime: Runtime,
    out: np.ndarray,
    grid: list[Tile],
    progress: str | None,
) -> None:
    scale, gray = generator.scale, out.ndim == 2
    # A bar inside the images' bar moves the cursor with ANSI codes: only on a terminal.
    with tqdm(
        grid,
        desc=progress,
        unit="tile",
        leave=False,
        dynamic_ncols=True,
        disable=progress is None or len(grid) == 1 or not sys.stderr.isatty(),
    ) as bar:
        for t in bar:
            lr = image[:, t.context_top : t.context_bottom, t.context_left : t.context_right]
            with runtime.autocast():
                sr = generator(runtime.tensor(lr[None]))
            # Keep the output of the tile's own cells only.
            top, left = scale * (t.top - t.context_top), scale * (t.left - t.context_left)
            sr = sr[:, :, top : top + scale * (t.bottom - t.top), left : left + scale * (t.right - t.left)]
            out[scale * t.top : scale * t.bottom, scale * t.left : scale * t.right] = to_output_pixels(
                sr, out.dtype, gray
            )
