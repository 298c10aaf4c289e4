"""Prepared training sets: every image decoded once, by `srgan prepare`, into
one file of raw pixels that crops are sliced from without decoding.

    DATASET/index.json   {"format": "srgan-prepared", "version": 1,
                          "images": [{"name", "height", "width", "offset"}],
                          "bytes": size of pixels.u8}
    DATASET/pixels.u8    each image as height x width x 3 uint8, row-major,
                          at its offset (64-byte aligned)

Why this format (measured in docs/performance.md): a crop is a slice of a
memory-mapped array, so it costs a copy of its own pixels and nothing else;
every DataLoader worker and every training process on the machine maps the
same file and shares its pages through the page cache, so memory does not
grow with workers; and it needs no library (LMDB) and no re-encoding
(BasicSR's sub-images are PNGs decoded again for every crop). It costs disk:
the raw size, larger than the PNGs it comes from (docs/performance.md).

`srgan prepare` writes a dataset under a temporary name and renames it when
complete, so an interrupted or failed run never leaves one that looks whole."""

from __future__ import annotations

import copy
import errno
import functools
import json
import logging
import os
import shutil
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from srgan.data.images import MAX_IMAGE_PIXELS, find_images, try_load_rgb8
from srgan.data.pairing import fit_hr_to_lr, folder_pairs
from srgan.files import DiskFull
from srgan.files.atomic import FULL_DISK_ERRNOS, dead_writers_temporaries, publish_folder, temporary_name
from srgan.files.errors import SrganError, first_line
from srgan.files.reading import not_found, parse_json, read_regular_text

log = logging.getLogger("srgan")

FORMAT = "srgan-prepared"
VERSION = 1
# A paired set (`srgan prepare HR --lr LR --scale S`): each entry also has
# "lr": {"height", "width", "offset"}, its LR image's pixels right after the HR
# image's (the HR cut to exactly LR x S), and the index says "scale": S. A new
# version, so that an srgan that knows only version 1 refuses it rather than
# training on its HR images with bicubic LR.
PAIRED_VERSION = 2
MAX_PAIRED_SCALE = 8
INDEX_NAME = "index.json"
PIXELS_NAME = "pixels.u8"
ALIGN = 64
# read_index reads index.json whole: at about 100 bytes an image, this holds a
# couple of million images' entries and keeps a forged one from filling the memory.
MAX_INDEX_BYTES = 256 * 2**20


def is_prepared(path: Path) -> bool:
    """A folder that holds a prepared dataset's index (of any version, or
    any kind of file: reading it says what is wrong with it)."""
    return os.path.lexists(Path(path) / INDEX_NAME) and os.path.lexists(Path(path) / PIXELS_NAME)


class PreparedImages:
    """The images of a prepared dataset, as read-only HxWx3 uint8 views of
    one memory-mapped file. Each process opens the mapping lazily (a
    DataLoader worker maps the file itself, so nothing is copied to it).
    Raises SrganError for a damaged index (read_index) and when no image is
    at least `min_side` px."""

    def __init__(self, path: Path, min_side: int = 0, key: str = "data.train"):
        self.path = Path(path)
        entries, self.pairs_scale = read_index_and_scale(self.path, key)  # scale: None unless paired
        usable = []
        for entry in entries:
            if min(entry["height"], entry["width"]) < min_side:
                log.warning(
                    "skipping %s in %s: %dx%d is smaller than %d px",
                    entry["name"],
                    self.path,
                    entry["width"],
                    entry["height"],
                    min_side,
                )
                continue
            usable.append(entry)
        if not usable:
            raise SrganError(f"{key}: {self.path}: no image of at least {min_side} px in the prepared dataset")
        self.entries = usable
        self.names = [entry["name"] for entry in usable]
        self._pixels: np.memmap | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def size(self, i: int) -> tuple[int, int]:
        return self.entries[i]["height"], self.entries[i]["width"]

    def image(self, i: int) -> np.ndarray:
        if self._pixels is None:
            self._pixels = np.memmap(self.path / PIXELS_NAME, dtype=np.uint8, mode="r")
        entry = self.entries[i]
        height, width = entry["height"], entry["width"]
        start = entry["offset"]
        return self._pixels[start : start + height * width * 3].reshape(height, width, 3)

    def select(self, indices: list[int]) -> PreparedImages:
        """The images at `indices` (in that order), as a set of their own."""
        chosen = copy.copy(self)
        chosen.entries = [self.entries[i] for i in indices]
        chosen.names = [self.names[i] for i in indices]
        return chosen

    def lr_images(self) -> PreparedImages:
        """A paired set's LR images, in the order of its HR images (same names)."""
        assert self.pairs_scale is not None, "only a paired set has LR images"
        chosen = copy.copy(self)
        chosen.entries = [{"name": entry["name"], **entry["lr"]} for entry in self.entries]
        chosen.pairs_scale = None
        return chosen

    def __getstate__(self) -> dict:
        # What a spawned worker receives: it maps the file itself rather than receive a copy.
        return {**self.__dict__, "_pixels": None}


def read_index(path: Path, key: str = "data.train") -> list[dict]:
    """The checked image entries of a prepared dataset. Raises SrganError,
    one line naming what is wrong, for a foreign or damaged index, another
    format version, or a pixel file that is missing or of another size than
    the index says."""
    return read_index_and_scale(path, key)[0]


def read_index_and_scale(path: Path, key: str = "data.train") -> tuple[list[dict], int | None]:
    """read_index, and the scale of a paired set's pairs (None for HR images alone)."""
    index_path, pixels_path = path / INDEX_NAME, path / PIXELS_NAME
    try:
        index = parse_json(read_regular_text(index_path, MAX_INDEX_BYTES, "prepared dataset's index"))
    except SrganError as error:
        raise SrganError(f"{key}: {error}") from None
    except ValueError as error:
        raise SrganError(f"{key}: {index_path}: not a readable index ({error})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise SrganError(f"{key}: {path}: not an srgan prepared dataset ({INDEX_NAME} does not say format: {FORMAT})")
    if index.get("version") not in (VERSION, PAIRED_VERSION):
        raise SrganError(
            f"{key}: {path}: prepared in format version {index.get('version')!r}; this srgan reads "
            f"versions {VERSION} and {PAIRED_VERSION}: prepare it again with `srgan prepare`"
        )
    scale = index.get("scale") if index["version"] == PAIRED_VERSION else None
    if index["version"] == PAIRED_VERSION and not (
        isinstance(scale, int) and not isinstance(scale, bool) and 1 <= scale <= MAX_PAIRED_SCALE
    ):
        raise SrganError(f"{key}: {index_path}: damaged (a paired set without a scale of 1 to {MAX_PAIRED_SCALE})")
    entries, declared = index.get("images"), index.get("bytes")
    if not isinstance(entries, list) or not entries or not isinstance(declared, int):
        raise SrganError(f"{key}: {index_path}: damaged (no images or no byte count)")
    try:
        pixels = pixels_path.stat()
    except OSError as error:
        raise SrganError(f"{key}: {pixels_path}: cannot be read ({first_line(error)})") from None
    if not stat.S_ISREG(pixels.st_mode):
        raise SrganError(f"{key}: {pixels_path}: not a regular file")
    if pixels.st_size != declared:
        raise SrganError(
            f"{key}: {pixels_path} is {pixels.st_size:,} bytes, its index says {declared:,}: the "
            "dataset is truncated or was changed; prepare it again"
        )
    # Each image has pixels of its own, after the previous one's (as prepare
    # writes them): so the index cannot claim more images (more steps an
    # epoch) than the pixel file holds.
    end = 0
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise SrganError(f"{key}: {index_path}: image {n} is damaged (no name)")
        # A paired entry's LR region follows its HR region: the loop checks both the same way.
        regions = [entry] if scale is None else [entry, entry.get("lr")]
        for region in regions:
            if not isinstance(region, dict) or not _region_ok(region, declared):
                raise SrganError(
                    f"{key}: {index_path}: image {n} is damaged (height, width, offset within {PIXELS_NAME})"
                )
            if region["offset"] < end:
                raise SrganError(
                    f"{key}: {index_path}: image {n} overlaps image {n - 1} in {PIXELS_NAME} (damaged or "
                    "forged: each image's pixels follow the previous one's)"
                )
            end = region["offset"] + region["height"] * region["width"] * 3
        if scale is not None and (entry["height"], entry["width"]) != (
            entry["lr"]["height"] * scale,
            entry["lr"]["width"] * scale,
        ):
            raise SrganError(f"{key}: {index_path}: image {n} is damaged (its HR is not its LR x {scale})")
    return entries, scale


def _region_ok(region: dict, declared: int) -> bool:
    """An image's {height, width, offset}: integers, its pixels within the pixel file."""
    return (
        all(
            isinstance(region.get(k), int) and not isinstance(region.get(k), bool)
            for k in ("height", "width", "offset")
        )
        and min(region["height"], region["width"]) >= 1
        and region["offset"] >= 0
        and region["height"] * region["width"] <= MAX_IMAGE_PIXELS
        and region["offset"] + region["height"] * region["width"] * 3 <= declared
    )


def prepare_dataset(
    sources: list[Path],
    out: Path,
    workers: int,
    force: bool = False,
    lr_folder: Path | None = None,
    scale: int | None = None,
) -> dict:
    """Decode every image below `sources` (in the order a folder's images are
    trained on) into a prepared dataset at `out`, skipping with one warning a
    file that cannot be decoded. With `lr_folder` (and `scale`): a paired set
    of one HR folder's images and their LR partners, matched as data.train_lr
    matches them (srgan.data.pairing). Returns counts for the summary. Raises
    SrganError for --lr without one HR folder and a valid `scale`, an `out`
    that exists without `force`, is no prepared dataset or holds a source,
    and when nothing decodes; DiskFull when the disk fills up."""
    out = Path(out)
    decode: Callable[[Any], list[np.ndarray] | None] = _decode_one
    if lr_folder is None:
        paths = _source_images(sources)
        jobs: list = paths
    else:
        if len(sources) != 1 or not Path(sources[0]).expanduser().is_dir():
            raise SrganError("--lr: pairs need exactly one folder of HR images (their partners match by relative path)")
        if scale is None or not 1 <= scale <= MAX_PAIRED_SCALE:
            raise SrganError(f"--scale: expected the pairs' scale, 1 to {MAX_PAIRED_SCALE}, with --lr; got {scale}")
        root = Path(sources[0]).expanduser()
        jobs = folder_pairs(find_images(root), root, Path(lr_folder).expanduser(), str(root), "--lr")
        paths = [hr for hr, _ in jobs]
        decode = functools.partial(_decode_pair, scale=scale)

    if out.exists() and not force:
        raise SrganError(f"-o {out}: exists (use --force to replace it)")
    if out.exists() and not is_prepared(out):
        raise SrganError(f"-o {out}: exists and is not a prepared dataset; refusing to replace it")
    for source in [*sources, *([lr_folder] if lr_folder is not None else [])]:  # --force removes the old one whole
        if out.exists() and Path(source).expanduser().resolve().is_relative_to(out.resolve()):
            raise SrganError(f"-o {out}: holds {source}, which this command reads; refusing to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(out)
    tmp = temporary_name(out)
    tmp.mkdir()
    try:
        written, skipped, total = _write_pixels(jobs, tmp / PIXELS_NAME, workers, decode)
        if not written:
            what = "images can be decoded" if lr_folder is None else "pairs can be decoded with sizes that agree"
            raise SrganError(f"{', '.join(map(str, sources))}: none of the {len(paths)} {what}")
        entries = []
        for job, regions in written:  # a job: an HR path, or an (HR, LR) pair
            entries.append({"name": (job if lr_folder is None else job[0]).name, **regions[0]})
            if lr_folder is not None:
                entries[-1]["lr"] = regions[1]
        index: dict = {
            "format": FORMAT,
            "version": VERSION if lr_folder is None else PAIRED_VERSION,
            "images": entries,
            "bytes": total,
            "sources": [str(Path(s).resolve()) for s in sources],
        }
        if lr_folder is not None:
            index.update(scale=scale, lr_source=str(Path(lr_folder).resolve()))
        _write_synced(tmp / INDEX_NAME, (json.dumps(index, indent=1) + "\n").encode())
        publish_folder(tmp, out, force)
    except OSError as error:
        if error.errno in FULL_DISK_ERRNOS:
            raise DiskFull(f"disk full at {tmp} ({error.strerror}); nothing was kept") from None
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise SrganError(
                f"-o {out}: exists (another srgan prepare wrote it meanwhile; use --force to replace it)"
            ) from None
        raise SrganError(f"-o {out}: cannot be written ({first_line(error)})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was renamed
    return {"images": len(entries), "skipped": skipped, "bytes": total}


def _decode_one(path: Path) -> list[np.ndarray] | None:
    image = try_load_rgb8(path)
    return None if image is None else [image]


def _decode_pair(pair: tuple[Path, Path], scale: int) -> list[np.ndarray] | None:
    """[HR cut to LR x scale, LR], or None (with a warning) for a pair that
    does not decode or whose sizes disagree with the scale."""
    hr, lr = try_load_rgb8(pair[0]), try_load_rgb8(pair[1])
    if hr is None or lr is None:
        return None
    fitted = fit_hr_to_lr(hr, lr, scale, pair)
    return None if fitted is None else [fitted, lr]


def _source_images(sources: list[Path]) -> list[Path]:
    paths: list[Path] = []
    for source in sources:
        source = Path(source).expanduser()
        if source.is_dir():
            found = find_images(source)
            if not found:
                raise SrganError(f"{source}: a folder with no images")
            paths += found
        elif source.is_file():
            paths.append(source)
        else:
            raise not_found(source, "file or folder")
    return paths


def _write_pixels(
    jobs: list, target: Path, workers: int, decode: Callable[[Any], list[np.ndarray] | None]
) -> tuple[list[tuple[Any, list[dict]]], int, int]:
    """Decode with `workers` threads (Pillow decodes without the GIL), with at
    most 2 x workers jobs in memory, and append their images to `target` in order
    (a job: an image file, or an HR/LR pair). Returns each written job with
    its images' {height, width, offset}, the jobs skipped, the bytes written."""
    written, skipped, offset = [], 0, 0
    window = max(1, 2 * workers)
    with (
        open(target, "wb") as f,
        ThreadPoolExecutor(max_workers=max(1, workers)) as pool,
        tqdm(total=len(jobs), unit="image", desc="prepare", dynamic_ncols=True) as bar,
    ):
        pending = {n: pool.submit(decode, job) for n, job in enumerate(jobs[:window])}
        for n, job in enumerate(jobs):
            images = pending.pop(n).result()  # dropping the future frees its images once written
            if n + window < len(jobs):
                pending[n + window] = pool.submit(decode, jobs[n + window])
            bar.update()
            if images is None:
                skipped += 1
                continue
            regions = []
            for image in images:
                pad = -offset % ALIGN
                if pad:
                    f.write(b"\0" * pad)
                    offset += pad
                f.write(np.ascontiguousarray(image).data)
                height, width = image.shape[:2]
                regions.append({"height": height, "width": width, "offset": offset})
                offset += image.nbytes
            written.append((job, regions))
        f.flush()
        os.fsync(f.fileno())
    return written, skipped, offset


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _remove_stale_temporaries(out: Path) -> None:
    """Temporary folders of a `srgan prepare` of the same target that was
    killed (its pid is gone): they hold disk space and will never finish.
    Only this name's, taken literally (a name such as `*` must not match
    other datasets' temporaries, nor `a` those of `a.1`)."""
    for tmp, name in dead_writers_temporaries(out.parent):
        if name == out.name:
            shutil.rmtree(tmp, ignore_errors=True)
