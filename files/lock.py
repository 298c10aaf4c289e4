"""One process at a time in a run folder: `RunLock` holds an exclusive
flock on `<run>/.lock` for as long as the run trains. The kernel drops the
lock when its process dies, however it dies, so the next run finds a lock
left by a killed run stale and takes it over; the file records who holds
it, for the message the second process prints and for `srgan runs`, which
reads it without locking."""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from srgan.files.errors import SrganError, first_line
from srgan.files.processes import process_alive, valid_pid
from srgan.files.reading import check_regular, parse_json, read_regular_bytes

log = logging.getLogger("srgan")

LOCK_NAME = ".lock"
HOLDER_BYTES = 4096  # the holder record is one short line; only this much of the file is looked at


class RunLock:
    """The lock of one run folder, as a context manager. `acquire` returns the
    lock; it raises SrganError when another process holds it, when .lock is a
    link or no regular file, or when the file system cannot lock."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        # Not through a link (the holder record would overwrite its target)
        # and never blocking on a FIFO; check_regular refuses anything but a
        # regular file before the lock or the record touches it.
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise SrganError(
                    f"{self.path}: a symbolic link, not the lock file srgan writes; remove it to use this run folder"
                ) from None
            raise SrganError(f"{self.path.parent}: cannot be used as a run folder ({first_line(error)})") from None
        try:
            check_regular(self.path, os.fstat(fd).st_mode)
        except SrganError as error:
            os.close(fd)
            raise SrganError(f"{error}; remove it to use this run folder") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_current_holder(fd))
            os.close(fd)
            raise SrganError(
                f"{self.path.parent}: the run folder is in use by {holder}; wait for it to finish or stop it "
                "(two processes in one run folder would write over each other's checkpoints and logs)"
            ) from None
        except OSError as error:  # a file system without flock: say so rather than run unprotected silently
            os.close(fd)
            raise SrganError(f"{self.path}: cannot lock the run folder ({error.strerror})") from None
        previous = _read_holder(fd)
        if previous.get("pid") and previous.get("pid") != os.getpid():
            log.info("%s: taking over the stale lock of %s, which is no longer running", self.path, _describe(previous))
        record = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%d %H:%M:%S")}
        )
        try:  # who holds it, for the message of a second process; a full disk only costs that message
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode() + b"\n", 0)
        except OSError:
            pass
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)  # no holder recorded: the folder is free
            except OSError:
                pass
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def read_holder(run_dir: Path) -> dict:
    """The holder recorded in a run folder's lock file, read without locking
    it: {} when there is no lock file or no record srgan would write.
    Raises SrganError for a lock that is no regular file (nothing can lock
    the folder then)."""
    path = Path(run_dir) / LOCK_NAME
    if not os.path.lexists(path):
        return {}
    return _holder_record(read_regular_bytes(path, 1 << 20, "lock file"))  # far more than any record


def holder_alive(holder: dict) -> bool:
    """Whether the recorded holder is a live process; one on another host
    counts as alive, since this host cannot see its processes."""
    pid, host = holder.get("pid"), holder.get("host")
    if not valid_pid(pid) or not isinstance(host, str):
        return False
    return host != socket.gethostname() or process_alive(pid)


def _current_holder(fd: int, patience: float = 1.0) -> dict:
    """The record of the process holding the lock. A holder writes its record
    just after it takes the flock, so a process refused in between reads an
    empty file (or a killed holder's old one): look again for a moment
    before settling for 'another process'."""
    deadline = time.monotonic() + patience
    while True:
        holder = _read_holder(fd)
        if holder_alive(holder) or time.monotonic() > deadline:
            return holder
        time.sleep(0.02)


def _read_holder(fd: int) -> dict:
    try:
        return _holder_record(os.pread(fd, HOLDER_BYTES, 0))
    except OSError:
        return {}


def _holder_record(data: bytes) -> dict:
    try:
        record = parse_json(data[:HOLDER_BYTES].decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _describe(holder: dict) -> str:
    if not holder.get("pid"):
        return "another process"
    return f"process {holder['pid']} on {holder.get('host', '?')} (since {holder.get('since', '?')})"
