"""What `srgan upscale` is asked to do: the options images and videos share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpscaleOptions:
    tile: int | None = None  # LR pixels a side; 0: the whole image at once; None: sized from free memory
    tile_pad: int | None = None  # LR pixels of context a tile reads; None: measured (inference/tile_pad.py)
    ext: str = "png"  # png, jpg or webp when -o is not a file name
    quality: int = 95  # jpg and webp
    suffix: str | None = None  # after the stem; None: _x<scale>
    outscale: float | None = None  # final scale, resized after the network; None: the network's
    alpha: str = "bicubic"  # how alpha is upscaled: bicubic or network
    force: bool = False  # overwrite existing outputs
    fp32_for_16bit: bool = False  # --precision auto: bf16 would keep only ~8 of 16 bits
    batch: int = 4  # video frames per forward pass (fewer when they would not fit the memory budget)
    crf: int = 18  # H.264 quality of the upscaled videos: 0 lossless ... 51 worst
    compare: bool = False  # videos: also write <stem><suffix>_compare.mp4, bicubic | SR
