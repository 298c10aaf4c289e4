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
the raw size, about twice DIV2K's PNGs (6.7 GB for its 800 training images).

A dataset is written under a temporary name and renamed when complete: an
interrupted or failed `srgan prepare` never leaves one that looks whole."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import errno
import glob
import json
import logging
import os
import re
import secrets
import shutil
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from tqdm import tqdm

from srgan.configs.errors import SrganError, first_line
from srgan.data.images import MAX_IMAGE_PIXELS, find_images, try_load_rgb8
from srgan.files import DiskFull
from srgan.files.atomic import FULL_DISK_ERRNOS
from srgan.files.reading import parse_json, read_regular_text

log = logging.getLogger("srgan")

FORMAT = "srgan-prepared"
VERSION = 1
INDEX_NAME = "index.json"
PIXELS_NAME = "pixels.u8"
ALIGN = 64
# index.json is read whole: about 100 bytes an image, so this holds a couple of
# million images' entries and keeps a forged one from filling the memory.
MAX_INDEX_BYTES = 256 * 2**20


def is_prepared(path: Path) -> bool:
    """A folder that holds a prepared dataset's index (of any version, or
    any kind of file: reading it says what is wrong with it)."""
    return os.path.lexists(Path(path) / INDEX_NAME) and os.path.lexists(Path(path) / PIXELS_NAME)


class PreparedImages:
    """The images of a prepared dataset, as read-only HxWx3 uint8 views of
    one memory-mapped file. The mapping is opened lazily in each process (a
    DataLoader worker maps the file itself; nothing is copied to it)."""

    def __init__(self, path: Path, min_side: int = 0, key: str = "data.train"):
        self.path = Path(path)
        entries = read_index(self.path, key)
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

    def __getstate__(self) -> dict:
        # Pickled for a spawned worker: it maps the file itself rather than receive a copy.
        return {**self.__dict__, "_pixels": None}


def read_index(path: Path, key: str = "data.train") -> list[dict]:
    """The checked image entries of a prepared dataset, or a one-line refusal
    naming what is wrong: a foreign or damaged index, another format
    version, a pixel file shorter than the index says."""
    index_path, pixels_path = path / INDEX_NAME, path / PIXELS_NAME
    try:
        index = parse_json(read_regular_text(index_path, MAX_INDEX_BYTES, "prepared dataset's index"))
    except SrganError as error:
        raise SrganError(f"{key}: {error}") from None
    except ValueError as error:
        raise SrganError(f"{key}: {index_path}: not a readable index ({error})") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise SrganError(f"{key}: {path}: not an srgan prepared dataset ({INDEX_NAME} does not say format: {FORMAT})")
    if index.get("version") != VERSION:
        raise SrganError(
            f"{key}: {path}: prepared in format version {index.get('version')!r}; this srgan reads "
            f"version {VERSION}: prepare it again with `srgan prepare`"
        )
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
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and all(
                isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                for k in ("height", "width", "offset")
            )
        )
        if (
            not ok
            or min(entry["height"], entry["width"]) < 1
            or entry["offset"] < 0
            or entry["height"] * entry["width"] > MAX_IMAGE_PIXELS
            or entry["offset"] + entry["height"] * entry["width"] * 3 > declared
        ):
            raise SrganError(
                f"{key}: {index_path}: image {n} is damaged (name, height, width, offset within {PIXELS_NAME})"
            )
        if entry["offset"] < end:
            raise SrganError(
                f"{key}: {index_path}: image {n} overlaps image {n - 1} in {PIXELS_NAME} (damaged or "
                "forged: each image's pixels follow the previous one's)"
            )
        end = entry["offset"] + entry["height"] * entry["width"] * 3
    return entries


def prepare_dataset(sources: list[Path], out: Path, workers: int, force: bool = False) -> dict:
    """Decode every image below `sources` (in the order a folder's images are
    trained on) into a prepared dataset at `out`; a file that cannot be
    decoded is skipped with one warning. Returns counts for the summary."""
    out = Path(out)
    paths = _source_images(sources)
    if out.exists() and not force:
        raise SrganError(f"-o {out}: exists (use --force to replace it)")
    if out.exists() and not is_prepared(out):
        raise SrganError(f"-o {out}: exists and is not a prepared dataset; refusing to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    tmp.mkdir()
    try:
        entries, skipped, total = _write_pixels(paths, tmp / PIXELS_NAME, workers)
        if not entries:
            raise SrganError(f"{', '.join(map(str, sources))}: none of the {len(paths)} images can be decoded")
        index = {
            "format": FORMAT,
            "version": VERSION,
            "images": entries,
            "bytes": total,
            "sources": [str(Path(s).resolve()) for s in sources],
        }
        _write_synced(tmp / INDEX_NAME, (json.dumps(index, indent=1) + "\n").encode())
        _replace(tmp, out, force)
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
            raise SrganError(f"{source}: no such file or folder")
    return paths


def _write_pixels(paths: list[Path], target: Path, workers: int) -> tuple[list[dict], int, int]:
    """Decode with `workers` threads (Pillow decodes without the GIL), at most
    2 x workers images in memory, and append them to `target` in order."""
    entries, skipped, offset = [], 0, 0
    window = max(1, 2 * workers)
    with (
        open(target, "wb") as f,
        ThreadPoolExecutor(max_workers=max(1, workers)) as pool,
        tqdm(total=len(paths), unit="image", desc="prepare", dynamic_ncols=True) as bar,
    ):
        pending = {n: pool.submit(try_load_rgb8, path) for n, path in enumerate(paths[:window])}
        for n, path in enumerate(paths):
            image = pending.pop(n).result()  # the future goes: the decoded image goes once written
            if n + window < len(paths):
                pending[n + window] = pool.submit(try_load_rgb8, paths[n + window])
            bar.update()
            if image is None:
                skipped += 1
                continue
            pad = -offset % ALIGN
            if pad:
                f.write(b"\0" * pad)
                offset += pad
            f.write(np.ascontiguousarray(image).data)
            height, width = image.shape[:2]
            entries.append({"name": path.name, "height": height, "width": width, "offset": offset})
            offset += image.nbytes
        f.flush()
        os.fsync(f.fileno())
    return entries, skipped, offset


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _replace(tmp: Path, out: Path, force: bool) -> None:
    """The finished folder takes the final name, unless something took it
    meanwhile (a second prepare started at the same time: EEXIST). With
    --force a dataset there is moved aside first and removed once the new
    one is in place, or put back if it could not be."""
    old = None
    if force and out.exists():
        old = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.old.tmp")
        os.rename(out, old)
    try:
        _rename_no_replace(tmp, out)
    except BaseException:
        if old is not None:
            with contextlib.suppress(OSError):
                _rename_no_replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_AT_FDCWD, _RENAME_NOREPLACE = -100, 1  # from Linux's <fcntl.h> and <linux/fs.h>


def _rename_no_replace(source: Path, target: Path) -> None:
    """Rename the folder `source` to `target`, or raise EEXIST if `target`
    exists, even as an empty folder (which a plain rename replaces). Linux's
    renameat2(RENAME_NOREPLACE) does it in one step; where the kernel, the C
    library or the file system lacks it, mkdir claims the name (it fails if
    taken) and the rename replaces that empty claim."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError, TypeError):  # not glibc >= 2.28 (macOS, musl, Windows...)
        renameat2 = None
    if renameat2 is not None:
        renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        if renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a file system without the flag
            raise OSError(code, os.strerror(code), str(target))
    os.mkdir(target)
    try:
        os.rename(source, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.rmdir(target)
        raise


def _remove_stale_temporaries(out: Path) -> None:
    """Temporary folders of a `srgan prepare` of the same target that was
    killed (its pid is gone): they hold disk space and will never finish.
    Only this name's: `.NAME.PID.HEX[.old].tmp`, NAME taken literally (a name
    such as `*` must not match other datasets' temporaries, nor `a` those of
    `a.1`)."""
    own = re.compile(rf"\.{re.escape(out.name)}\.(\d+)\.[0-9a-f]{{8}}(\.old)?\.tmp")
    for tmp in out.parent.glob(f".{glob.escape(out.name)}.*.tmp"):
        match = own.fullmatch(tmp.name)
        if match is None:
            continue
        try:
            os.kill(int(match[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except (OverflowError, PermissionError):  # PermissionError: alive, another user's
            pass
