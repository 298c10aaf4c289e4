"""Reading files that anyone may hand us: checkpoints and weight files, and
the small text files of a run folder. A FIFO, a device or a link to one
stands where a regular file is expected as easily as a damaged file does:
neither may hang a command, read without end or end in a traceback."""

from __future__ import annotations

import json
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Any

from srgan.configs.errors import SrganError, first_line

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular(path: Path, mode: int) -> None:
    """Refuse anything but a regular file (a link is judged by what it points to)."""
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "an unusual file")
        raise SrganError(f"{path}: not a regular file ({kind})")


def read_regular_bytes(path: Path, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes`. Checked before it
    is opened (a device is never opened) and again on the opened file, which
    is opened without blocking (a FIFO would wait for a writer); at most
    `max_bytes` + 1 bytes are read whatever the file claims or becomes."""
    path = Path(path)
    try:
        check_regular(path, os.stat(path).st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise SrganError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        size = os.fstat(fd)
        check_regular(path, size.st_mode)  # swapped for something else since the check above
        if size.st_size > max_bytes:
            raise SrganError(f"{path}: {size.st_size:,} bytes; a {what} is at most {max_bytes:,}")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:  # it grew while read
            raise SrganError(f"{path}: more than {max_bytes:,} bytes; a {what} is at most that")
        return b"".join(chunks)
    except OSError as error:
        raise SrganError(f"{path}: cannot be read ({error.strerror})") from None
    finally:
        os.close(fd)


def read_regular_text(path: Path, max_bytes: int, what: str = "file") -> str:
    """read_regular_bytes as UTF-8 text."""
    try:
        return read_regular_bytes(path, max_bytes, what).decode("utf-8")
    except UnicodeDecodeError:
        raise SrganError(f"{path}: not text (UTF-8); the file is damaged") from None


def parse_json(text: str) -> Any:
    """json.loads, with a document nested too deeply for the parser (it
    raises RecursionError) reported as the ValueError of any other bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_torch_file(path: Path, what: str = "checkpoint") -> Any:
    """torch.load with weights_only (tensors and plain values, never code).
    Memory-mapped where the format allows, so that tensors cost no more than
    the file's own bytes whatever its header claims."""
    import torch

    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap can only be used" not in str(error):
                raise
            with warnings.catch_warnings():  # its advice to file an issue; a refusal below says it in one line
                warnings.filterwarnings("ignore", message="Detected pickle protocol")
                return torch.load(path, map_location="cpu", weights_only=True)  # the legacy (pre-1.6) format
    except Exception as error:  # truncated zip, not a torch file, pickled code...
        text = str(error)
        refused = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", text)
        if refused:
            raise SrganError(
                f"{path}: refused: loading it would run Python code (GLOBAL {refused.group(1)}); "
                f"srgan loads only tensors and plain values from a {what}"
            ) from None
        if "Weights only load failed" in text:  # the unpickler's own reason sits among its advice
            reasons = [
                line.strip()
                for line in text.splitlines()
                if line.strip() and not line.startswith(("Weights only", "Please file", "Check the doc"))
            ]
            reason = f"{error.__class__.__name__}: {reasons[0]}" if reasons else error.__class__.__name__
        else:
            reason = first_line(error)
        raise SrganError(f"{path}: not a readable {what} ({reason})") from None
