"""The one way srgan writes a file.

`write_file` writes a temporary file beside the target (a name unique to the
process, so two writers never share one), flushes it to disk and renames it
into place: a kill or a full disk at any moment leaves either the old file
or the new one, never half of one, and no temporary file behind (the next
srgan process that writes into the folder removes one that a kill -9 left).
It refuses to write over an input, and over an existing file unless asked
to (`overwrite`, what `--force` sets); the target's resolved path must lie
in the folder the caller named, so that a name built from user parts cannot
escape it. `temporary_path` gives the same guarantees to writers that must
open the file by name themselves (FFmpeg's muxers); `publish_folder` to a
folder built under a temporary name (`srgan prepare`'s datasets)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from srgan.files.errors import SrganError, first_line
from srgan.files.inputs import check_not_read, written
from srgan.files.processes import process_alive

log = logging.getLogger("srgan")

# What a full disk (or a quota, or a file-size limit) raises on a write.
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFull(SrganError):
    """No room to write a file; the previous version of it is untouched."""


def check_output(path: Path, overwrite: bool = False, inputs: Iterable[Path] = (), folder: Path | None = None) -> Path:
    """Return the resolved path of a target fit to write; raise SrganError
    for one that is an input (one of `inputs`, or any file the command
    reads: srgan.files.inputs), that exists (unless `overwrite`), that is a
    folder, whose name is too long for the file system, or whose resolved
    path is not in `folder` (default: the folder its name says). write_file
    checks again at the rename; checking before any work wastes none."""
    path = Path(path)
    if path.name in ("", ".", "..") or "\x00" in str(path):
        raise SrganError(f"{path}: not a file name")
    _check_name_length(path)
    asked = (path.parent if folder is None else Path(folder)).resolve()
    final = path.parent.resolve() / path.name
    if final.parent != asked:
        raise SrganError(f"{path}: lies outside {asked}, where it was asked to be written")
    for source in inputs:
        if _same_file(final, Path(source)):
            raise SrganError(f"{path}: is an input; refusing to write over it")
    check_not_read(final, path)  # every file this command reads: its checkpoint, config, each input image
    if final.is_dir():
        raise SrganError(f"{path}: is a folder, not a file name")
    if not overwrite and (final.exists() or final.is_symlink()):
        raise SrganError(f"{path}: exists (use --force to overwrite)")
    return final


def write_file(
    path: Path,
    save: Callable[[BinaryIO], object],
    overwrite: bool = False,
    inputs: Iterable[Path] = (),
    folder: Path | None = None,
) -> None:
    """Write `path` atomically with `save(file)`. Raises SrganError for a
    refused target, DiskFull when the disk fills up (the temporary file is
    removed, an old `path` kept), and lets other errors of `save` through
    after removing the temporary file."""
    final = _checked_target(path, overwrite, inputs, folder)
    tmp = temporary_name(final)
    watched: _WatchedFile | None = None
    existed = final.exists()
    try:
        try:
            with open(tmp, "xb") as f:
                watched = _WatchedFile(f)
                save(cast(BinaryIO, watched))  # it passes every attribute but write through to f
                f.flush()
                os.fsync(f.fileno())
            if overwrite:
                os.replace(tmp, final)
            else:
                _link_no_clobber(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
    except BaseException as error:
        # torch.save reports a failed write as a RuntimeError of its own: the
        # OSError underneath is what the wrapper saw.
        cause = error if isinstance(error, OSError) else watched.error if watched is not None else None
        if cause is not None and (cause is error or cause.errno in FULL_DISK_ERRNOS):
            raise _write_error(cause, path, final, existed) from None
        raise
    _sync_folder(final.parent)
    written(final)


@contextlib.contextmanager
def temporary_path(
    path: Path, overwrite: bool = False, inputs: Iterable[Path] = (), folder: Path | None = None
) -> Iterator[Path]:
    """write_file for writers that must open a path themselves (FFmpeg's
    muxers): yields the temporary name beside `path`; when the block ends
    normally the file is flushed to disk and renamed into place, by the same
    rules as write_file; on any exception, KeyboardInterrupt included, it is
    removed and nothing is renamed. The caller tells the writer the format
    itself: the temporary name ends in .tmp, never in the target's
    extension, so that no command takes a left-over one (after a kill -9)
    for an input. Raises SrganError and DiskFull as write_file does."""
    final = _checked_target(path, overwrite, inputs, folder)
    tmp = temporary_name(final)
    existed = final.exists()
    try:
        yield tmp
        try:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            if overwrite:
                os.replace(tmp, final)
            else:
                _link_no_clobber(tmp, final)
        except OSError as error:
            raise _write_error(error, path, final, existed) from None
    finally:
        tmp.unlink(missing_ok=True)
    _sync_folder(final.parent)
    written(final)


def write_bytes(path: Path, data: bytes, **checks) -> None:
    """write_file of `data`; `checks` are write_file's keyword arguments."""
    write_file(path, lambda f: f.write(data), **checks)


def write_text(path: Path, text: str, **checks) -> None:
    """write_bytes of `text` as UTF-8."""
    write_bytes(path, text.encode("utf-8"), **checks)


class _WatchedFile:
    """A file object that remembers the OSError of a failed write, for
    writers (torch.save) that replace it with an exception of their own."""

    def __init__(self, file: BinaryIO):
        self._file = file
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self._file.write(data)
        except OSError as error:
            self.error = error
            raise

    def __getattr__(self, name: str):
        return getattr(self._file, name)


def _checked_target(path: Path, overwrite: bool, inputs: Iterable[Path], folder: Path | None) -> Path:
    """check_output, then make the target's folder."""
    final = check_output(path, overwrite, inputs, folder)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SrganError(f"{final.parent}: cannot be made a folder ({first_line(error)})") from None
    _remove_leftovers(final.parent)
    return final


LEFTOVER_AGE_S = 60  # a temporary file this long untouched by a dead writer is its leftover
# What temporary_name makes: `.<name>.<pid>.<8 hex>[<suffix>].tmp` (prepare's moved-aside dataset: `.old`).
TEMPORARY_NAME = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{8}(\.old)?\.tmp")
_swept: set[Path] = set()  # folders this process has already swept


def temporary_name(final: Path, suffix: str = "") -> Path:
    """A hidden name beside `final`, unique to this process and this write."""
    return final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}.tmp")


def dead_writers_temporaries(folder: Path) -> list[tuple[Path, str]]:
    """The temporaries in `folder` (files or folders named by temporary_name)
    whose writing process is gone, each with the name it was to take."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        match = TEMPORARY_NAME.fullmatch(name)
        if match is not None and not process_alive(int(match[2])):
            found.append((folder / name, match[1]))
    return found


def _remove_leftovers(folder: Path) -> None:
    """Remove the temporary files that killed writers left in `folder`
    (kill -9 and power cuts run no cleanup; a long video's is gigabytes),
    those not written to for a minute (a writer on another machine sharing
    the folder keeps writing to its file). A process sweeps each folder
    once, so that writing many files into one folder stays linear."""
    if folder in _swept:
        return
    _swept.add(folder)
    for path, _ in dead_writers_temporaries(folder):
        try:
            if path.is_file() and not path.is_symlink() and time.time() - path.stat().st_mtime > LEFTOVER_AGE_S:
                path.unlink()
                log.info("removed %s, left by a process stopped while writing it", path)
        except OSError:
            pass


def _write_error(error: OSError, path: Path, final: Path, existed: bool) -> SrganError:
    """The one-line refusal for an OSError met while writing `final`."""
    if error.errno in FULL_DISK_ERRNOS:
        kept = f"the previous {final.name} is kept" if existed else "nothing was written"
        return DiskFull(f"disk full at {final} ({error.strerror}); {kept}")
    if error.errno == errno.EEXIST:
        return SrganError(f"{path}: exists (another process wrote it meanwhile; use --force to overwrite)")
    # permissions, a vanished folder, a read-only file system...
    return SrganError(f"{final}: cannot be written ({first_line(error)})")


def _link_no_clobber(tmp: Path, final: Path) -> None:
    """Rename that fails when `final` exists (a hard link is atomic and never
    replaces); on file systems without hard links, check then rename."""
    try:
        os.link(tmp, final)
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if final.exists():
            raise OSError(errno.EEXIST, "exists", str(final)) from None
        os.replace(tmp, final)


# What temporary_name adds to a name at most: "." before, ".<pid, 7 digits>.<8 hex>.tmp" after.
TEMPORARY_EXTRA = 1 + 1 + 7 + 1 + 8 + 4


def _check_name_length(path: Path) -> None:
    """Refuse a name the file system would refuse (255 bytes on most), with
    room for the temporary beside it, before anything stats it (a stat's
    ENAMETOOLONG would be a traceback)."""
    absolute = os.fsencode(os.path.abspath(path))
    if len(absolute) >= 4096:  # Linux's PATH_MAX
        raise SrganError(f"{str(path)[:60]}...: a path of {len(absolute):,} bytes; paths hold at most 4,095")
    for part in Path(os.path.abspath(path.parent)).parts:
        if len(os.fsencode(part)) > 255:
            raise SrganError(f"{path}: the folder name {part[:40]}... is {len(os.fsencode(part))} bytes; at most 255")
    folder = Path(os.path.abspath(path.parent))
    while not folder.exists() and folder != folder.parent:  # folders still to make lie on their parent's file system
        folder = folder.parent
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    size = len(os.fsencode(path.name))
    if size + TEMPORARY_EXTRA > limit:
        raise SrganError(
            f"{path.parent / path.name[:40]}...: a file name of {size} bytes; file names here hold at most "
            f"{limit - TEMPORARY_EXTRA} (the file system's {limit}, less what srgan's temporary name beside it adds)"
        )


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b.resolve()


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (where the platform lets a folder be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish_folder(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished folder `tmp` to `out`; raise FileExistsError if
    something took that name meanwhile (a second writer of the same name).
    With `force` it moves a folder already there aside first, and removes it
    once the new one is in place, or puts it back if the rename fails."""
    old = None
    if force and out.exists():
        old = temporary_name(out, ".old")
        os.rename(out, old)
    try:
        rename_no_replace(tmp, out)
    except BaseException:
        if old is not None:
            with contextlib.suppress(OSError):
                rename_no_replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _sync_folder(out.parent)


_AT_FDCWD, _RENAME_NOREPLACE = -100, 1  # from Linux's <fcntl.h> and <linux/fs.h>


def rename_no_replace(source: Path, target: Path) -> None:
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
