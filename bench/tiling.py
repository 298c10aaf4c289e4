"""How far tiled upscaling is from the whole-image forward, against the
context a tile reads (--tile-pad), with the pad `--tile-pad auto` measures
for the same weights: the figures behind docs/tiling.md.

    python -m srgan.bench.tiling --set model.arch=rrdb --set model.blocks=23
    python -m srgan.bench.tiling -k runs/my-rrdb-run --pads 8,16,32

One interior cell of `--cell` LR pixels, in the middle of a real photo,
is upscaled as srgan's tiler upscales a tile (inference/tile_grid.py: context
clipped to the image and aligned to the generator's unshuffle groups) for
each pad, and compared with the same pixels of the whole-image output: the
largest difference in 8-bit levels (1 = 1/255) and the share of the cell's
8-bit output pixels that differ. An interior cell is the worst case: a
cell at the border reads the image's edge on that side, as the whole image
does. fp32 on the CPU; any seam larger than fp32 rounding comes from the
missing context."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from PIL import Image

from srgan.bench.machine import machine
from srgan.configs import load_config
from srgan.data import load_rgb8
from srgan.data.samples import sample_paths
from srgan.files.errors import SrganError
from srgan.inference.tile_grid import Tile, paste_tiles
from srgan.inference.tile_pad import measure_tile_pad
from srgan.models import Runtime, SRGenerator, build_generator
from srgan.models.checkpoint import load_generator
from srgan.models.spandrel_generator import SpandrelGenerator

DEFAULT_PADS = (0, 2, 4, 6, 8, 12, 16, 24, 32, 48)


def seam_table(generator: SRGenerator, image: torch.Tensor, cell: int, pads: list[int]) -> list[dict]:
    """Per pad: the largest |tiled - whole| over the central cell's output,
    in 8-bit levels, and the share of its 8-bit pixels that differ."""
    runtime = Runtime(torch.device("cpu"), "fp32", channels_last=False)
    generator = generator.eval()
    _, height, width = image.shape
    align, scale = generator.tile_align, generator.scale
    top = (height - cell) // 2 // align * align
    left = (width - cell) // 2 // align * align
    whole = np.empty((height * scale, width * scale, 3), np.float32)
    with torch.inference_mode():
        paste_tiles(generator, image, runtime, whole, [Tile(0, height, 0, width, 0, height, 0, width)], None)
    rows, out = [], np.empty_like(whole)
    region = (slice(scale * top, scale * (top + cell)), slice(scale * left, scale * (left + cell)))
    for pad in pads:
        tile = Tile(
            top,
            top + cell,
            left,
            left + cell,
            max(0, top - pad) // align * align,
            min(height, top + cell + pad),
            max(0, left - pad) // align * align,
            min(width, left + cell + pad),
        )
        with torch.inference_mode():
            paste_tiles(generator, image, runtime, out, [tile], None)
        diff = np.abs(out[region] - whole[region]).max() * 255
        levels = lambda a: np.round(np.clip(a, 0, 1) * 255)  # noqa: E731 (what a PNG would hold)
        changed = float((levels(out[region]) != levels(whole[region])).any(axis=-1).mean())
        rows.append({"pad": pad, "max_diff_8bit": float(diff), "changed_pixels": changed})
    return rows


def smallest_pad(rows: list[dict], limit: float = 1.0) -> int | None:
    """The smallest pad from which on every measured pad stays below `limit` 8-bit levels."""
    best = None
    for row in reversed(rows):
        if row["max_diff_8bit"] >= limit:
            break
        best = row["pad"]
    return best


def photo_lr(size: int, scale: int) -> torch.Tensor:
    """The middle of scikit-image's astronaut (or of noise without it),
    size x size, as the bicubic LR image a model sees: 3 x size x size in [0, 1]."""
    try:
        hr = load_rgb8(sample_paths(["astronaut"])[0])
        side = min(size * scale, *hr.shape[:2])
        y, x = (hr.shape[0] - side) // 2, (hr.shape[1] - side) // 2
        lr = Image.fromarray(hr[y : y + side, x : x + side]).resize((size, size), Image.Resampling.BICUBIC)
        pixels = np.asarray(lr)
    except Exception:  # no scikit-image: noise (harder on the context than a photo)
        pixels = np.random.default_rng(0).integers(0, 256, (size, size, 3), dtype=np.uint8)
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1).float() / 255


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="demo", help="a preset or YAML file whose model.* builds the generator")
    parser.add_argument("--set", action="append", default=[], help="key=value, as srgan train --set")
    parser.add_argument("-k", "--checkpoint", help="a checkpoint or run folder: its trained generator instead")
    parser.add_argument("--seed", type=int, default=0, help="for the random weights of --config")
    parser.add_argument("--size", type=int, default=128, help="the LR photo's side")
    parser.add_argument("--cell", type=int, default=32, help="the tile's own cells, LR pixels a side")
    parser.add_argument("--pads", default=",".join(map(str, DEFAULT_PADS)), help="comma-separated pads to measure")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)

    try:
        if args.checkpoint:
            generator, source = load_generator(args.checkpoint), args.checkpoint
        else:
            torch.manual_seed(args.seed)
            generator, source = build_generator(load_config(args.config, args.set).model), "random weights"
        pads = sorted({int(p) for p in args.pads.split(",")})
    except (SrganError, ValueError) as error:
        print(f"srgan.bench.tiling: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    # what `--tile-pad auto` chooses for these weights (the probe, not cached here), measured on the photo too
    measured = measure_tile_pad(generator.eval(), Runtime(torch.device("cpu"), "fp32", channels_last=False))
    probe_seconds = time.perf_counter() - started
    rows = seam_table(generator, photo_lr(args.size, generator.scale), args.cell, sorted({*pads, measured.pad}))
    result = {
        "bench": "tiling",
        "arch": generator.arch,
        "scale": generator.scale,
        "blocks": generator.blocks,
        "channels": generator.channels,
        "growth": getattr(generator, "growth", None),
        "weights": source,
        "receptive_radius": generator.receptive_radius,
        "measured_tile_pad": measured.pad,
        "probe_seam_8bit": measured.seam,
        "probe_seconds": round(probe_seconds, 1),
        "size": args.size,
        "cell": args.cell,
        "rows": rows,
        "pad_below_one_level": smallest_pad(rows),
        "seconds": round(time.perf_counter() - started, 1),
        **machine(),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    shape = f"{result['blocks']} blocks x {result['channels']} channels"
    if isinstance(generator, SpandrelGenerator):  # blocks and channels are srgan's own architectures' notions
        shape = f"{type(generator.network).__name__} through spandrel"
    print(
        f"{result['arch']} x{result['scale']}, {shape}, "
        f"{source}; receptive radius {result['receptive_radius']}, --tile-pad auto {measured.pad} "
        f"(probe: {result['probe_seam_8bit']} levels, {result['probe_seconds']} s)"
    )
    print(f"a {args.cell} px cell in the middle of a {args.size} px photo, fp32 CPU")
    print(f"{'pad':>5}  {'max |tiled - whole| (8-bit levels)':>36}  {'8-bit pixels changed':>20}")
    for row in rows:
        print(f"{row['pad']:>5}  {row['max_diff_8bit']:>36.4f}  {row['changed_pixels']:>20.2%}")
    print(f"below one 8-bit level from pad {result['pad_below_one_level']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
