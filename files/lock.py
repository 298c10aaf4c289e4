"""One process at a time in a run folder: `RunLock` holds an exclusive
flock on `<run>/.lock` for as long as the run trains. The kernel drops the
lock when its process dies, however it dies, so a lock left by a killed run
is recognised as stale and taken over; the file records who holds it, for
the message the second process prints."""
from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from srgan.configs.errors import SrganError, first_line

log = logging.getLogger("srgan")

LOCK_NAME = ".lock"


class RunLock:
    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise SrganError(f"{self.path.parent}: cannot be used as a run folder ({first_line(error)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(_read_holder(fd))
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
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "since": time.strftime("%Y-%m-%d %H:%M:%S")})
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


def _read_holder(fd: int) -> dict:
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _describe(holder: dict) -> str:
    if not holder.get("pid"):
        return "another process"
    return f"process {holder['pid']} on {holder.get('host', '?')} (since {holder.get('since', '?')})"
