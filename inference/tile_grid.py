"""The tile grid: an image cut into cells, each run through a generator with
`pad` LR pixels of context, and the output of each cell pasted into place.

Each tile reads its own cells plus `pad` LR pixels of context on every side
(clipped at the image border, where the whole-image forward sees the convs'
zero padding too) and keeps only the output of its own cells. With `pad` at
least the generator's receptive radius every kept output pixel saw exactly
the input the whole-image forward would have shown it: no seams. Below it,
how large the seams are depends on the weights: the pad is measured on the
network (inference/tile_pad.py, docs/tiling.md). The tile sets the peak
memory; the output is a preallocated integer array that each tile is
converted into as it is pasted.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import DTypeLike
from tqdm import tqdm

from srgan.models import Runtime, SRGenerator

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


def paste_tiles(
    generator: SRGenerator,
    image: torch.Tensor,
    runtime: Runtime,
    out: np.ndarray,
    grid: list[Tile],
    progress: str | None,
) -> None:
    """Run each tile of `grid` through `generator` and write the output of its
    own cells into `out` (HxWx3, or HxW for grayscale) in `out`'s dtype.
    `progress` names a bar over the tiles; None shows none."""
    scale, gray = generator.scale, out.ndim == 2
    # A bar nested in the images' bar moves the cursor with ANSI codes, which a log file cannot show: terminals only.
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
