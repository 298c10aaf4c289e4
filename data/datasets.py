"""Image folders or prepared datasets -> (lr, hr) tensors in [0, 1]: random crops, flips and
90-degree turns for training, centre crops for validation; the LR made by
bicubic downscaling (PIL's, the literature's convention) on the fly.

Training samples are addressed by (epoch, index) and their randomness is
drawn from (seed, epoch, index) alone, so a batch is the same whatever the
number of workers and a resumed run sees the very crops it would have seen."""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, Sampler

from srgan.configs.schema import RealEsrganDegradation
from srgan.data.degradations import degrade, named_generator
from srgan.data.images import find_images, image_size, load_rgb8, try_load_rgb8
from srgan.data.prepared import PreparedImages, is_prepared
from srgan.data.samples import BUILTIN_SAMPLES, TRAIN_SAMPLES, VAL_SAMPLES, sample_paths
from srgan.files.errors import SrganError, first_line
from srgan.files.reading import kind_of

log = logging.getLogger("srgan")
T = TypeVar("T")


def open_images(spec: str, key: str, min_side: int, cache_mb: int = 0) -> FolderImages | PreparedImages:
    """The images of a `data.train`/`data.val` value: a prepared dataset
    (`srgan prepare`), a folder of image files, or builtin:samples."""
    if spec != BUILTIN_SAMPLES and is_prepared(Path(spec).expanduser()):
        return PreparedImages(Path(spec).expanduser(), min_side, key)
    return FolderImages(resolve_images(spec, key, min_side), cache_mb, key, spec)


def named(key: str, spec: str) -> str:
    """How a message names a data value: "data.train: photos/", or the path
    alone where it is its own key (degrade's SOURCE)."""
    return spec if key == spec else f"{key}: {spec}"


def resolve_images(spec: str, key: str, min_side: int) -> list[Path]:
    """The usable image files of a `data.train`/`data.val` value: a folder, or
    builtin:samples. It skips files that are not images or are smaller than
    `min_side`, with one warning each, and raises SrganError when the value
    is no folder or no file is usable."""
    if spec == BUILTIN_SAMPLES:
        candidates = sample_paths(TRAIN_SAMPLES if key == "data.train" else VAL_SAMPLES)
    else:
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            kind = kind_of(folder)
            raise SrganError(
                f"{named(key, spec)}: {'no such folder' if kind is None else f'not a folder ({kind})'} "
                f"(expected a folder of images, a dataset made by `srgan prepare`, or {BUILTIN_SAMPLES})"
            )
        candidates = find_images(folder)
    usable = []
    for path in candidates:
        try:
            width, height = image_size(path)
        except Exception as error:  # PIL raises many types for a broken file
            log.warning("skipping %s: cannot be decoded (%s)", path, first_line(error))
            continue
        if min(width, height) < min_side:
            log.warning("skipping %s: %dx%d is smaller than %d px", path, width, height, min_side)
            continue
        usable.append(path)
    if not usable:
        raise SrganError(
            f"{named(key, spec)}: no usable image (png, jpg, jpeg, bmp, webp, tif) of at least {min_side} px"
        )
    return usable


class FolderImages:
    """Image files as HxWx3 uint8 arrays. It decodes the first images that
    fit in `cache_mb` once, up front (decoding a photo costs far more than
    cropping it, docs/performance.md; DataLoader workers share the arrays),
    and the rest each time they are asked for. Decoding up front also finds
    the files that are broken past their header: it drops them with a
    warning, and raises SrganError when none can be decoded."""

    def __init__(self, paths: list[Path], cache_mb: int = 0, key: str = "data.train", spec: str = ""):
        sizes = [image_size(path) for path in paths]  # (width, height), from the headers
        budget, cached = cache_mb * 2**20, 0
        while cached < len(paths) and budget >= sizes[cached][0] * sizes[cached][1] * 3:
            budget -= sizes[cached][0] * sizes[cached][1] * 3
            cached += 1
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # PIL decodes without the GIL
            decoded = list(pool.map(try_load_rgb8, paths[:cached]))
        keep = [image is not None for image in decoded] + [True] * (len(paths) - cached)
        self.paths = [path for path, kept in zip(paths, keep, strict=True) if kept]
        self._sizes = [(h, w) for (w, h), kept in zip(sizes, keep, strict=True) if kept]
        self._cache = dict(enumerate(image for image in decoded if image is not None))  # position -> pixels
        if not self.paths:
            raise SrganError(f"{key}: none of the {len(paths)} images can be decoded")
        if cached < len(paths) and cache_mb > 0:
            total = sum(w * h * 3 for w, h in sizes)
            log.warning(
                "%s: %.1f GB of decoded images; %d of %d images (%.1f GB) are kept in memory (data.cache_mb %d), "
                "the rest are decoded for every crop. `srgan prepare %s -o PREPARED` once, then data.train: "
                "PREPARED, makes every crop a slice",
                key,
                total / 1e9,
                len(self._cache),
                len(paths),
                (cache_mb * 2**20 - budget) / 1e9,
                cache_mb,
                spec or "FOLDER",
            )
        self.names = [path.name for path in self.paths]

    def __len__(self) -> int:
        return len(self.paths)

    @property
    def cached(self) -> int:
        """How many of the images are held decoded in memory."""
        return len(self._cache)

    def size(self, i: int) -> tuple[int, int]:
        return self._sizes[i]

    def select(self, indices: list[int]) -> FolderImages:
        """The images at `indices` (in that order), as a set of their own."""
        chosen = copy.copy(self)
        chosen.paths = [self.paths[i] for i in indices]
        chosen._sizes = [self._sizes[i] for i in indices]
        chosen._cache = {new: self._cache[old] for new, old in enumerate(indices) if old in self._cache}
        chosen.names = [self.names[i] for i in indices]
        return chosen

    def image(self, i: int) -> np.ndarray:
        """Image i; raises SrganError if it is broken past its header (and
        not cached): callers may take another (see TrainPairs)."""
        if i in self._cache:
            return self._cache[i]
        try:
            return load_rgb8(self.paths[i])
        except SrganError:
            raise
        except Exception as error:  # PIL raises many types for a broken file
            raise SrganError(f"{self.paths[i]}: cannot be decoded ({first_line(error)})") from None


def bicubic_downscale(hr: np.ndarray, scale: int) -> np.ndarray:
    """HxWx3 uint8 -> (H/scale)x(W/scale)x3 uint8 with PIL's bicubic (antialiased)."""
    height, width = hr.shape[:2]
    image = Image.fromarray(hr).resize((width // scale, height // scale), Image.Resampling.BICUBIC)
    return np.asarray(image)


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """HxWx3 uint8 -> 3xHxW float32 in [0, 1]."""
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float().div_(255)


def low_resolution(
    hr: np.ndarray, scale: int, degradation: RealEsrganDegradation | None, rng: np.random.Generator
) -> torch.Tensor:
    """The LR tensor of an HxWx3 uint8 HR: PIL's bicubic downscale, or (given
    a data.realesrgan config) Real-ESRGAN's degradation drawn from `rng`."""
    if degradation is None:
        return to_tensor(bicubic_downscale(hr, scale))
    return degrade(to_tensor(hr), scale, degradation, rng)


class TrainPairs(Dataset):
    """Random (lr, hr) crops, `repeat` per image per epoch, keyed by (epoch, index),
    from a FolderImages or a PreparedImages: the same crops from either. With
    a `degradation` the LR is Real-ESRGAN's, drawn from the crop's generator
    after the crop: the same crops as bicubic, and the same bits anywhere."""

    def __init__(
        self,
        images: FolderImages | PreparedImages,
        crop_size: int,
        scale: int,
        repeat: int,
        seed: int,
        degradation: RealEsrganDegradation | None = None,
    ):
        self.images, self.crop_size, self.scale = images, crop_size, scale
        self.repeat, self.seed, self.degradation = repeat, seed, degradation
        self._broken: set[int] = set()  # images found broken when decoded, in this process

    def __len__(self) -> int:
        return len(self.images) * self.repeat

    def _image(self, i: int) -> np.ndarray:
        return first_decodable(i, len(self.images), self._broken, self.images.image, "images")

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, index = key
        rng = np.random.default_rng((self.seed, epoch, index))
        image = self._image(index % len(self.images))
        height, width = image.shape[:2]
        c = self.crop_size
        top = int(rng.integers(0, height - c + 1))
        left = int(rng.integers(0, width - c + 1))
        (hr,) = flip_and_turn(rng, image[top : top + c, left : left + c])
        return low_resolution(hr, self.scale, self.degradation, rng), to_tensor(hr)


def first_decodable(i: int, count: int, broken: set[int], load: Callable[[int], T], what: str) -> T:
    """load(i), or if item i is broken past its header the next good one
    (cyclically); `broken` remembers the broken ones, so each is warned of
    once. Raises SrganError when none of the `count` items loads."""
    for j in range(i, i + count):
        if j % count in broken:
            continue
        try:
            return load(j % count)
        except SrganError as error:
            broken.add(j % count)
            log.warning("skipping %s", error)
    raise SrganError(f"data.train: none of the {count} {what} can be decoded")


def flip_and_turn(rng: np.random.Generator, *images: np.ndarray) -> list[np.ndarray]:
    """The same random left-right flip, up-down flip and quarter turns of
    each image (an HR crop, or an aligned LR/HR pair), made contiguous."""
    if rng.random() < 0.5:
        images = tuple(image[:, ::-1] for image in images)
    if rng.random() < 0.5:
        images = tuple(image[::-1, :] for image in images)
    turns = int(rng.integers(0, 4))
    return [np.ascontiguousarray(np.rot90(image, k=turns)) for image in images]


class EpochSampler(Sampler):
    """Yields (epoch, index) keys: a fresh permutation every epoch from
    (seed, epoch), cut into global batches of batch_size x world keys (a set
    smaller than one is cycled); rank r takes the r-th batch_size keys of
    each. So N ranks together see exactly the crops one process sees with N
    times the batch, and a resumed epoch (`skip_keys` already consumed) goes
    on where it stopped, whatever the number of ranks then."""

    def __init__(self, size: int, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        self.size, self.batch_size, self.seed, self.rank, self.world = size, batch_size, seed, rank, world
        self.epoch, self.skip_keys = 0, 0

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world

    @property
    def steps_per_epoch(self) -> int:
        return max(1, self.size // self.global_batch)

    @property
    def keys_per_epoch(self) -> int:
        return self.steps_per_epoch * self.global_batch

    def steps_left(self) -> int:
        return max(0, (self.keys_per_epoch - self.skip_keys) // self.global_batch)

    def set_epoch(self, epoch: int, skip_keys: int = 0) -> None:
        self.epoch, self.skip_keys = epoch, skip_keys

    def __len__(self) -> int:
        return self.steps_left() * self.batch_size

    def __iter__(self):
        rng = np.random.default_rng((self.seed, self.epoch))
        needed = self.keys_per_epoch
        rounds = -(-needed // self.size)  # ceil: a set smaller than a batch is cycled
        order = np.concatenate([rng.permutation(self.size) for _ in range(rounds)])[:needed].tolist()
        for step in range(self.steps_left()):
            start = self.skip_keys + step * self.global_batch + self.rank * self.batch_size
            for index in order[start : start + self.batch_size]:
                yield (self.epoch, index)


class ValImages(Dataset):
    """Whole validation images (centre-cropped to a multiple of the scale,
    and to `max_size` a side when set): (name, lr, hr). With a `degradation`
    the LR is degraded as the training LR is, from a generator fixed by
    (seed, the image's name): the same LR at every validation."""

    def __init__(
        self,
        images: FolderImages | PreparedImages,
        scale: int,
        max_size: int = 0,
        degradation: RealEsrganDegradation | None = None,
        seed: int = 0,
    ):
        self.images, self.scale, self.max_size = images, scale, max_size
        self.degradation, self.seed = degradation, seed

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[str, torch.Tensor, torch.Tensor]:
        hr = centre_crop(self.images.image(i), self.scale, self.max_size)
        name = Path(self.images.names[i]).stem
        return name, low_resolution(hr, self.scale, self.degradation, named_generator(self.seed, name)), to_tensor(hr)


def centre_crop(image: np.ndarray, scale: int, max_size: int = 0) -> np.ndarray:
    """The centred region whose sides are multiples of `scale` (at most `max_size`)."""
    height, width = image.shape[:2]
    new_h, new_w = height - height % scale, width - width % scale
    if max_size:
        cap = max_size - max_size % scale
        new_h, new_w = min(new_h, cap), min(new_w, cap)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    return image[top : top + new_h, left : left + new_w]
