"""`srgan degrade`: a contact sheet of the training pairs a config makes,
degraded LR crop (nearest-upscaled to the GT's size) beside its GT crop, so
a user sees what a model will learn from before spending a GPU day on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from srgan.configs import Config
from srgan.data.datasets import FolderImages, PreparedImages, TrainPairs, open_images
from srgan.data.images import IMAGE_EXTENSIONS, image_size
from srgan.data.sheets import GAP, side_by_side
from srgan.files.errors import SrganError
from srgan.files.reading import not_found


def source_images(source: Path, crop_size: int) -> FolderImages | PreparedImages:
    """The images of SOURCE: an image file, a folder of them, or a prepared
    dataset. Raises SrganError for a file that is no image, cannot be decoded
    or is smaller than `crop_size`, and for what open_images refuses."""
    if source.exists() and not (source.is_file() or source.is_dir()):  # a FIFO, a device: never opened
        raise not_found(source, "file or folder")
    if source.is_file():
        if source.suffix.lower() not in IMAGE_EXTENSIONS:
            raise SrganError(f"{source}: not an image (expected an image file or a folder of images)")
        try:
            width, height = image_size(source)
        except Exception as error:  # PIL raises many types for a broken file
            raise SrganError(f"{source}: cannot be decoded as an image ({error})") from None
        if min(width, height) < crop_size:
            raise SrganError(f"{source}: {width}x{height} is smaller than data.crop_size {crop_size}")
        return FolderImages([source], cache_mb=0, key=str(source))
    return open_images(str(source), str(source), crop_size)


def degradation_sheet(images: FolderImages | PreparedImages, config: Config, count: int, seed: int) -> np.ndarray:
    """An HxWx3 uint8 sheet of `count` rows, LR (nearest-upscaled) | GT: the
    crops and LR that training with `config` and `seed` draws first (epoch 0,
    indices 0 .. count-1, the images in turn)."""
    d = config.data
    pairs = TrainPairs(images, d.crop_size, config.model.scale, 1, seed, d.pipeline)
    rows = []
    for index in range(count):
        lr, hr = pairs[(0, index)]
        lr8 = (lr * 255).round().byte().permute(1, 2, 0).numpy()
        hr8 = (hr * 255).round().byte().permute(1, 2, 0).numpy()
        scale = config.model.scale
        rows.append(side_by_side([lr8.repeat(scale, axis=0).repeat(scale, axis=1), hr8]))
    padded = [np.pad(row, ((0, GAP), (0, 0), (0, 0)), constant_values=255) for row in rows]
    return np.concatenate(padded, axis=0)[:-GAP]
