"""Paired data: LR images given beside the HR ones (two cameras, a microscope,
a renderer at two resolutions) rather than made by bicubic downscaling.

An LR image is matched to the HR image with the same relative path less its
extension (a.png <-> a.jpg, sub/b.png <-> sub/b.webp). srgan uses a pair when
the HR is LR x scale, or larger by fewer than `scale` pixels a side (it then
cuts the HR to LR x scale from its top-left corner, as BasicSR's paired
dataset does for validation and as srgan's own mod-crop does before a
bicubic LR), and skips any other pair with a warning naming it. It skips
images without a partner (either side) with one warning: a count and the
first few names.

Training crops are aligned (the LR crop at (x, y), the HR crop at (x s, y s))
and flipped and turned together, their randomness drawn from (seed, epoch,
index) as TrainPairs' is; validation crops the centres of both sides, aligned."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from srgan.configs.schema import BUILTIN_SAMPLES, RealEsrganDegradation
from srgan.data.datasets import (
    FolderImages,
    TrainPairs,
    ValImages,
    first_decodable,
    flip_and_turn,
    open_images,
    to_tensor,
)
from srgan.data.images import find_images, image_size
from srgan.data.pairing import folder_pairs, sizes_agree, warn_size
from srgan.data.prepared import PreparedImages, is_prepared
from srgan.files.errors import SrganError, first_line

log = logging.getLogger("srgan")


class PairedImages:
    """HR images and their LR partners, as HxWx3 uint8 arrays: pair(i) is
    (LR, HR cut to LR x scale). Either side a FolderImages or PreparedImages."""

    def __init__(self, hr: FolderImages | PreparedImages, lr: FolderImages | PreparedImages, scale: int):
        assert len(hr) == len(lr)
        self.hr, self.lr, self.scale = hr, lr, scale
        self.names = hr.names

    def __len__(self) -> int:
        return len(self.hr)

    def lr_size(self, i: int) -> tuple[int, int]:
        return self.lr.size(i)

    def pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Raises SrganError for a file broken past its header (not cached)."""
        lr = self.lr.image(i)
        height, width = lr.shape[:2]
        return lr, self.hr.image(i)[: height * self.scale, : width * self.scale]

    def select(self, indices: list[int]) -> PairedImages:
        chosen = copy.copy(self)
        chosen.hr, chosen.lr = self.hr.select(indices), self.lr.select(indices)
        chosen.names = chosen.hr.names
        return chosen


def open_image_set(
    spec: str, lr_spec: str | None, key: str, lr_key: str, scale: int, min_side: int, cache_mb: int = 0
) -> FolderImages | PreparedImages | PairedImages:
    """The images of data.train (data.val) with data.train_lr (data.val_lr):
    HR images alone (open_images), a folder pair, or a prepared paired set.
    `min_side`: the HR side an image needs (its LR needs min_side / scale).
    Raises SrganError for an LR folder beside a prepared set, a prepared set
    of another scale, and a folder pair with no usable pair."""
    path = Path(spec).expanduser()
    if spec != BUILTIN_SAMPLES and is_prepared(path):
        prepared = PreparedImages(path, min_side, key)
        if prepared.pairs_scale is None and lr_spec is None:
            return prepared
        if lr_spec is not None:
            raise SrganError(
                f"{lr_key}: {key} {spec} is a prepared set: name a folder of HR images beside {lr_key}, "
                f"or prepare the pairs with `srgan prepare HR --lr LR --scale S` and leave {lr_key} out"
            )
        if prepared.pairs_scale != scale:
            raise SrganError(f"{key}: {spec} holds x{prepared.pairs_scale} pairs; model.scale is {scale}")
        return PairedImages(prepared, prepared.lr_images(), scale)
    if lr_spec is None:
        return open_images(spec, key, min_side, cache_mb)
    if not path.is_dir():
        raise SrganError(f"{key}: {spec}: no such folder (expected a folder of HR images beside {lr_key})")
    pairs = []
    for hr_path, lr_path in folder_pairs(find_images(path), path, Path(lr_spec).expanduser(), key, lr_key):
        try:
            (hr_w, hr_h), (lr_w, lr_h) = image_size(hr_path), image_size(lr_path)
        except Exception as error:  # PIL raises many types for a broken file
            log.warning("skipping the pair %s / %s: cannot be decoded (%s)", hr_path, lr_path, first_line(error))
            continue
        if not sizes_agree((hr_h, hr_w), (lr_h, lr_w), scale):
            warn_size((hr_path, lr_path), (hr_w, hr_h), (lr_w, lr_h), scale)
            continue
        if min(lr_h, lr_w) * scale < min_side:
            log.warning("skipping %s: %dx%d is smaller than %d px", hr_path, hr_w, hr_h, min_side)
            continue
        pairs.append((hr_path, lr_path))
    if not pairs:
        raise SrganError(f"{key}, {lr_key}: no pair whose sizes agree with model.scale {scale} (see the warnings)")
    hr_budget = cache_mb * scale**2 // (scale**2 + 1)  # the decoded LR is 1/scale^2 of its HR
    hr = FolderImages([h for h, _ in pairs], hr_budget, key, spec)
    lr = FolderImages([lo for _, lo in pairs], cache_mb - hr_budget, lr_key, lr_spec)
    # A file found broken past its header drops its pair.
    kept_hr, kept_lr = set(hr.paths), set(lr.paths)
    both = [(h, lo) for h, lo in pairs if h in kept_hr and lo in kept_lr]
    if not both:
        raise SrganError(f"{key}, {lr_key}: none of the {len(pairs)} pairs can be decoded")
    hr_index, lr_index = {p: i for i, p in enumerate(hr.paths)}, {p: i for i, p in enumerate(lr.paths)}
    return PairedImages(hr.select([hr_index[h] for h, _ in both]), lr.select([lr_index[lo] for _, lo in both]), scale)


class PairedCrops(Dataset):
    """TrainPairs for paired data: random aligned (lr, hr) crops, `repeat` per
    pair per epoch, keyed by (epoch, index), drawn from (seed, epoch, index)."""

    def __init__(self, images: PairedImages, crop_size: int, scale: int, repeat: int, seed: int):
        self.images, self.crop_size, self.scale = images, crop_size, scale
        self.repeat, self.seed = repeat, seed
        self._broken: set[int] = set()  # pairs found broken when decoded, in this process

    def __len__(self) -> int:
        return len(self.images) * self.repeat

    def _pair(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return first_decodable(i, len(self.images), self._broken, self.images.pair, "pairs")

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, index = key
        rng = np.random.default_rng((self.seed, epoch, index))
        lr, hr = self._pair(index % len(self.images))
        s, c = self.scale, self.crop_size // self.scale  # c: the LR crop's side
        top = int(rng.integers(0, lr.shape[0] - c + 1))
        left = int(rng.integers(0, lr.shape[1] - c + 1))
        lr = lr[top : top + c, left : left + c]
        hr = hr[top * s : (top + c) * s, left * s : (left + c) * s]
        lr, hr = flip_and_turn(rng, lr, hr)
        return to_tensor(lr), to_tensor(hr)


def training_crops(
    images: FolderImages | PreparedImages | PairedImages,
    crop_size: int,
    scale: int,
    repeat: int,
    seed: int,
    degradation: RealEsrganDegradation | None = None,
) -> TrainPairs | PairedCrops:
    """The training dataset of an image set: crops with bicubic (or
    `degradation`'s) LR, or aligned paired crops. Raises SrganError for a
    `degradation` of paired images, whose LR is given."""
    if isinstance(images, PairedImages):
        if degradation is not None:
            raise SrganError(
                "data.degradation: realesrgan with a prepared paired set in data.train: the LR images are given, "
                "there is nothing to degrade (set data.degradation: bicubic)"
            )
        return PairedCrops(images, crop_size, scale, repeat, seed)
    return TrainPairs(images, crop_size, scale, repeat, seed, degradation)


class PairedValImages(ValImages):
    """ValImages for paired data: (name, lr, hr), both centre-cropped aligned
    (the LR to at most max_size / scale a side, the HR to the same region)."""

    images: PairedImages  # type: ignore[assignment]  # the paired set, where ValImages has HR images

    def __getitem__(self, i: int) -> tuple[str, torch.Tensor, torch.Tensor]:
        lr, hr = aligned_centre_crop(*self.images.pair(i), self.scale, self.max_size)
        return Path(self.images.names[i]).stem, to_tensor(lr), to_tensor(hr)


def aligned_centre_crop(lr: np.ndarray, hr: np.ndarray, scale: int, max_size: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The centred LR region of at most max_size / scale a side (0: all) and the HR region it stands for."""
    height, width = lr.shape[:2]
    cap = max_size // scale if max_size else max(height, width)
    new_h, new_w = min(height, cap), min(width, cap)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    s = scale
    return lr[top : top + new_h, left : left + new_w], hr[top * s : (top + new_h) * s, left * s : (left + new_w) * s]


def validation_images(
    images: FolderImages | PreparedImages | PairedImages,
    scale: int,
    max_size: int,
    degradation: RealEsrganDegradation | None = None,
    seed: int = 0,
) -> ValImages:
    """ValImages (their LR bicubic, or `degradation`'s with a generator fixed
    by `seed` and the image's name), or PairedValImages for paired data,
    whose LR is given (as Real-ESRGAN validates: on real pairs)."""
    if isinstance(images, PairedImages):
        return PairedValImages(images, scale, max_size)  # type: ignore[arg-type]
    return ValImages(images, scale, max_size, degradation, seed)
