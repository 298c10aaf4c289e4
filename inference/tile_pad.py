"""The context a tile reads (`--tile-pad auto`): measured on the network's
own weights, once per model, and cached by the weights' content hash.

How far an input pixel can change an output pixel is bounded by the
receptive radius, but how far it does is a property of the weights: an
rrdb at ESRGAN's initialisation reads a few pixels of its receptive radius,
the published Real-ESRGAN x4plus many more (docs/tiling.md). So the pad is
measured, not set per architecture.

The probe: a synthetic LR image (dead leaves: overlapping discs of random
colours and sizes from 1 pixel to a quarter of the image, the stand-in for
natural images that camera tests use: edges at every scale, flat areas
between them), fixed by a seed. Its top-left cell of CELL pixels is
upscaled by the tiler itself (inference/tile_grid.py) from the context
[0, CELL + pad) on both axes, for growing pads, and compared with the same
cell upscaled from a larger context (REFERENCE_GAP further, or the
receptive radius, where tiles are exact): the seam of a pad is the largest
|difference| over the cell's output, clamped to [0, 1] as a file holds it,
in 8-bit levels. fp32, TF32 off.

A network whose reach the probe cannot see (SAFMN: a pixel beyond the
context moves a max-pooled window only where it is the window's largest,
which the probe's image rarely makes it) is not probed: its pad is its
receptive radius, counted (models/spandrel_generator.py), up to CAP.

The chosen pad is the smallest that keeps the probe's seam at or below
LIMIT = 1/4 of an 8-bit level, so that a real tile stays below one level
with a margin of 4: 2 for the geometry (the probe's cell is cut on two
sides, where the context beyond each cut is a quadrant, not the half plane
a tile's corner loses) and 2 for content harsher than the probe's. It is
never more than the receptive radius (exact tiles) nor CAP; at the cap a
network that still shows a seam is said to."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from srgan.files.cache import cache_file as shared_cache_file
from srgan.files.cache import read_entries, write_entries
from srgan.files.errors import SrganError
from srgan.inference.tile_grid import Tile, paste_tiles
from srgan.models import Runtime, SRGenerator

PROBE = "dead-leaves corner v1"  # part of the cache key: a changed probe measures again
CELL = 8  # the probe's cell, input pixels a side (times the unshuffle of rrdb x1, x2)
LADDER = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # pads tried, in order (times the unshuffle)
CAP = 128  # the largest pad chosen (times the unshuffle): tiles of 512 then cost (768/512)^2 = 2.25x
LIMIT = 0.25  # 8-bit levels: the probe's seam a pad may leave (a margin of 4 below one level)
REFERENCE_GAP = 16  # the reference reads at least this much (and a third) more context than the pad tried
CACHE_ENTRIES = 256  # models remembered; the oldest measured is forgotten first


@dataclass(frozen=True)
class TilePad:
    """The context a tile reads, in input pixels, and where it came from."""

    pad: int
    how: str  # "given" (--tile-pad), "measured", "counted" (the receptive radius, no probe) or "cached"
    seam: float | None = None  # the probe's largest |tiled - whole| at `pad`, in 8-bit levels
    exact: bool = False  # `pad` is the receptive radius: tiles equal the whole image
    capped: bool = False  # the cap, with a seam above LIMIT still at the largest pad tried below it
    seconds: float | None = None  # the probe's time, when measured now

    def describe(self) -> str:
        """For the model's summary line: "tile pad 48 (measured in 1.2 s: seams
        <= 0.12 of an 8-bit level on the probe)"."""
        if self.how == "given":
            return f"tile pad {self.pad} (given)"
        how = self.how if self.seconds is None else f"{self.how} in {self.seconds:.1f} s"
        if self.exact:
            return f"tile pad {self.pad} ({how}: the receptive radius, exact tiles)"
        seam = "?" if self.seam is None else f"{self.seam:.2g}"
        if self.capped and self.seam is None:  # counted, not probed: a receptive radius beyond the cap
            return f"tile pad {self.pad} ({how}: the cap, below the receptive radius; --tile 0 runs whole images)"
        if self.capped:
            return (
                f"tile pad {self.pad} ({how}: the cap, and still seams of {seam} 8-bit levels at the pad below it; "
                "--tile 0 runs whole images)"
            )
        return f"tile pad {self.pad} ({how}: seams <= {seam} of an 8-bit level on the probe)"


def tile_pad(network: SRGenerator, runtime: Runtime, given: int | None = None) -> TilePad:
    """The pad tiles of `network` read: `given` when the user gave one, else
    the measured one (from the cache when these weights were measured
    before). The one place that decides it, for upscale, video, evaluate,
    compare and validation alike. Raises SrganError when CUDA runs out of
    memory while measuring it."""
    if given is not None:
        return TilePad(given, "given")
    if pad_is_counted(network):
        return measure_tile_pad(network, runtime)  # at once: no cache (nor an older probe's entry)
    key = weights_key(network)
    path = cache_file()
    entries = read_cache(path)
    cached = _entry(entries.get(key))
    if cached is not None:
        return dataclasses.replace(cached, how="cached")
    started = time.perf_counter()
    measured = measure_tile_pad(network, runtime)
    seconds = time.perf_counter() - started
    entries.pop(key, None)
    entries[key] = {
        "pad": measured.pad,
        "seam": measured.seam,
        "exact": measured.exact,
        "capped": measured.capped,
        "arch": network.arch,
        "seconds": round(seconds, 2),
    }
    write_cache(path, entries)
    return dataclasses.replace(measured, seconds=seconds)


def pad_is_counted(network: SRGenerator) -> bool:
    """Whether the pad is the counted receptive radius, not probed: a network
    whose reach the probe misses (SAFMN's max pooling) and whose radius is known."""
    return getattr(network, "probe_misses_reach", False) and network.receptive_radius is not None


def measure_tile_pad(network: SRGenerator, runtime: Runtime) -> TilePad:
    """The probe (module docstring): the smallest pad of the ladder whose
    seam is at most LIMIT, the receptive radius or the cap."""
    unit = getattr(network, "unshuffle", 1)  # rrdb x1, x2: the body's grid is coarser than the input's
    radius = network.receptive_radius  # None: not computed (spandrel's architectures)
    cap = CAP * unit if radius is None else min(CAP * unit, radius)
    if pad_is_counted(network) and radius is not None:  # (pad_is_counted says it is not None; mypy cannot see it)
        return TilePad(cap, "counted", seam=0.0 if cap == radius else None, exact=cap == radius, capped=cap < radius)
    candidates = [p * unit for p in LADDER if p * unit < cap]
    cell = CELL * unit

    def reference(pad: int) -> int:
        wanted = pad + max(REFERENCE_GAP * unit, pad // 3)
        further = [p * unit for p in (*LADDER, 2 * CAP) if p * unit >= wanted]
        return min(further[0], radius) if radius is not None else further[0]

    image = dead_leaves(cell + max([reference(p) for p in candidates], default=cap))
    outputs: dict[int, np.ndarray] = {}

    def cell_output(pad: int) -> np.ndarray:
        if pad not in outputs:
            outputs[pad] = _upscale_corner(network, runtime, image, cell, pad)
        return outputs[pad]

    seam = None
    with _exact_fp32():
        for pad in candidates:
            try:
                seam = float(np.abs(cell_output(pad) - cell_output(reference(pad))).max() * 255)
            except torch.cuda.OutOfMemoryError:
                raise SrganError(
                    f"CUDA out of memory measuring the tile pad on a {image.shape[1]} px test image "
                    "(give --tile-pad, or try --device cpu)"
                ) from None
            if seam <= LIMIT:
                return TilePad(pad, "measured", seam=seam)
    if radius is not None and cap == radius:
        return TilePad(cap, "measured", seam=0.0, exact=True)
    return TilePad(cap, "measured", seam=seam, capped=seam is not None and seam > LIMIT)


def _upscale_corner(network: SRGenerator, runtime: Runtime, image: torch.Tensor, cell: int, pad: int) -> np.ndarray:
    """The output of the image's top-left cell, upscaled from the context
    [0, cell + pad) on both axes, as the tiler upscales a tile."""
    scale = network.scale
    out = np.empty((cell * scale, cell * scale, 3), np.float32)
    side = min(cell + pad, image.shape[1])
    fp32 = dataclasses.replace(runtime, precision="fp32")
    with torch.inference_mode():
        paste_tiles(network, image, fp32, out, [Tile(0, cell, 0, cell, 0, side, 0, side)], None)
    return out


@contextmanager
def _exact_fp32() -> Iterator[None]:
    """cuDNN's convolutions in fp32, not TF32 (its default on Ampere and
    later, rounding to 10 bits: noise the probe would take for seams)."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = before


def dead_leaves(side: int, seed: int = 0) -> torch.Tensor:
    """3 x side x side in [0, 1]: discs of random colours, radii from 2
    pixels to side / 4 with density ~ 1 / r^3 (scale invariance), each
    seen where no earlier one lies, until they cover the image; then mild
    noise (2 levels), as a camera adds. Fixed by `seed`."""
    rng = np.random.default_rng(seed)
    canvas = np.full((side, side, 3), 0.5, np.float32)  # (where no disc reached: a few pixels at most)
    covered = np.zeros((side, side), bool)
    ys, xs = np.mgrid[0:side, 0:side]
    r_min, r_max = 2.0, max(2.0, side / 4)
    for count in range(1, 1 << 16):
        u = rng.random()  # inverse CDF of p(r) ~ r^-3 on [r_min, r_max]
        r = 1 / math.sqrt(1 / r_min**2 - u * (1 / r_min**2 - 1 / r_max**2))
        cy, cx = rng.uniform(-r, side + r, 2)
        colour = rng.random(3).astype(np.float32)
        top, bottom = max(0, int(cy - r)), min(side, int(cy + r) + 1)
        left, right = max(0, int(cx - r)), min(side, int(cx + r) + 1)
        if top >= bottom or left >= right:
            continue
        disc = (ys[top:bottom, left:right] - cy) ** 2 + (xs[top:bottom, left:right] - cx) ** 2 <= r * r
        canvas[top:bottom, left:right][disc & ~covered[top:bottom, left:right]] = colour
        covered[top:bottom, left:right] |= disc
        if count % 256 == 0 and covered.all():
            break
    pixels = canvas + rng.normal(0, 2 / 255, canvas.shape).astype(np.float32)
    return torch.from_numpy(np.clip(pixels, 0, 1)).permute(2, 0, 1).contiguous()


def weights_key(network: SRGenerator) -> str:
    """sha256 of what decides the network's function: its class, scale and
    every tensor of its state (names, dtypes, shapes, bytes), and the probe's
    version. The same weights from a .pth, a .safetensors or a run folder
    share one entry; a checkpoint rewritten with other weights gets its own."""
    digest = hashlib.sha256(f"{PROBE}\n{type(network).__name__}\n{network.arch}\n{network.scale}\n".encode())
    for name, tensor in network.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}\n".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def cache_file() -> Path:
    """$XDG_CACHE_HOME/srgan/tile_pads.json (~/.cache when unset or not an
    absolute path, as the XDG specification says)."""
    return shared_cache_file("tile_pads.json")


def read_cache(path: Path) -> dict[str, dict]:
    """The measured pads by weights key; {} for a missing file, and also for
    one that is not such a cache (damaged, foreign, too large): that one gets
    a warning, never an error, and the next write replaces it."""
    return read_entries(path, "pads", "tile pad cache")


def write_cache(path: Path, entries: dict[str, dict]) -> None:
    """Write the newest CACHE_ENTRIES. When the cache cannot be written, it logs
    a warning and the command goes on (the pad is measured again next time)."""
    write_entries(path, {"srgan_tile_pads": 1, "probe": PROBE}, "pads", entries, CACHE_ENTRIES, "tile pad")


def _entry(value: object) -> TilePad | None:
    """A cache entry as a TilePad, or None for one that does not hold up."""
    if not isinstance(value, dict):
        return None
    pad, seam = value.get("pad"), value.get("seam")
    if type(pad) is not int or not 0 <= pad <= 1 << 16:
        return None
    if seam is not None and (not isinstance(seam, int | float) or not math.isfinite(seam) or seam < 0):
        return None
    return TilePad(
        pad, "cached", None if seam is None else float(seam), value.get("exact") is True, value.get("capped") is True
    )
