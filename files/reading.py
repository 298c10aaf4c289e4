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

from srgan.files.errors import SrganError, first_line
from srgan.files.inputs import note_read

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_regular(path: Path, mode: int) -> None:
    """Raise SrganError for anything but a regular file (judging a link by what it points to)."""
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "an unusual file")
        raise SrganError(f"{path}: not a regular file ({kind})")


def reading_regular(path: Path, what: str) -> None:
    """Before a decoder opens `path` by name (Pillow, PyAV): note it as read
    (srgan.files.inputs) and raise SrganError for what is not a regular
    file, which would block (a FIFO) or never end (a device). The decoder
    reports a path that does not exist in its own error."""
    note_read(path, what)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    check_regular(path, mode)


def kind_of(path: Path) -> str | None:
    """What is at `path` (a link judged by what it points to): "a FIFO",
    "a folder", "a regular file"...; None where nothing is."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return (
        "a regular file"
        if stat.S_ISREG(mode)
        else next((name for test, name in _KINDS if test(mode)), "an unusual file")
    )


def not_found(path: Path, expected: str) -> SrganError:
    """The refusal of a path that is not the regular file or folder a command
    expected (`expected`: "file or folder"): what it is where something is
    (a FIFO, a device, or a link to one), else that there is no such thing."""
    kind = kind_of(path)
    if kind is None:
        return SrganError(f"{path}: no such {expected}")
    return SrganError(f"{path}: not a regular file ({kind})")


def read_regular_bytes(path: Path, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes`; SrganError for
    anything else, a larger file or one it cannot read. It checks the path
    before opening it (so it never opens a device) and again the opened
    file, which it opens without blocking (a FIFO would wait for a writer);
    it reads at most `max_bytes` + 1 bytes whatever the file claims or becomes."""
    path = Path(path)
    note_read(path, f"the {what}")
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
    """read_regular_bytes as UTF-8 text; SrganError also for bytes that are not UTF-8."""
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


def read_torch_file(path: Path, what: str = "checkpoint", expected: str = "") -> Any:
    """torch.load with weights_only (tensors and plain values, never code);
    raises SrganError for a file that is unreadable or would run code, with
    `expected` saying what would do. It memory-maps the file where the format
    allows, so that tensors cost no more than the file's own bytes whatever
    its header claims."""
    import torch  # here, not at the top: srgan --help and config loading import files/ without torch

    note_read(path, f"the {what}")
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
        wanted = f"; expected {expected}" if expected else ""
        raise SrganError(f"{path}: not a readable {what} ({reason}){wanted}") from None


# A safetensors file: 8 bytes of little-endian header length, a JSON header
# (names -> dtype, shape, data_offsets; and an optional "__metadata__" of
# strings), then the tensors' bytes. The limit is safetensors' own on the header.
SAFETENSORS_MAX_HEADER = 100_000_000


def looks_like_safetensors(path: Path) -> bool:
    """Whether `path` is a safetensors file, by name (.safetensors) or by
    content: a header length, then '{'."""
    if Path(path).suffix.lower() == ".safetensors":
        return True
    try:
        with open(path, "rb") as file:
            start = file.read(9)
    except OSError:
        return False
    return len(start) == 9 and start[8:9] == b"{"


def read_safetensors_file(path: Path, what: str = "weights file") -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors and the metadata of a .safetensors file. It checks the
    header first (its length against the file's, its JSON, every tensor's
    offsets against the data that follows), so that it refuses a forged one
    in one line (SrganError) before the safetensors package reads the
    tensors; the format holds no code to run."""
    path = Path(path)
    note_read(path, f"the {what}")
    try:
        check_regular(path, os.stat(path).st_mode)
        size = os.stat(path).st_size
        with open(path, "rb") as file:
            start = file.read(8)
            if len(start) < 8:
                raise SrganError(f"{path}: {size} bytes; not a safetensors {what} (no header)")
            length = int.from_bytes(start, "little")
            if length > min(size - 8, SAFETENSORS_MAX_HEADER):
                raise SrganError(
                    f"{path}: its safetensors header claims {length:,} bytes, the file holds {size - 8:,} "
                    "after the length (truncated or not a safetensors file)"
                )
            raw = file.read(length)
    except OSError as error:
        raise SrganError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        header = parse_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise SrganError(f"{path}: its safetensors header is not JSON ({first_line(error)})") from None
    if not isinstance(header, dict):
        raise SrganError(f"{path}: its safetensors header is not a JSON object")
    data_bytes = size - 8 - length
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SrganError(f"{path}: safetensors __metadata__: expected a mapping of strings")
    for name, entry in header.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("dtype"), str)
            and isinstance(entry.get("shape"), list)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry["shape"])
            and isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
        ):
            raise SrganError(f"{path}: safetensors tensor {name!r}: expected dtype, shape and data_offsets")
        if not 0 <= offsets[0] <= offsets[1] <= data_bytes:
            raise SrganError(
                f"{path}: safetensors tensor {name!r}: bytes {offsets[0]}..{offsets[1]} lie outside the "
                f"{data_bytes:,} bytes of data (truncated or forged)"
            )
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise SrganError(
            f"{path}: reading .safetensors needs the safetensors package: pip install 'srgan[interop]'"
        ) from None
    try:
        return load_file(str(path), device="cpu"), metadata
    except Exception as error:  # safetensors' own checks: sizes against dtypes and shapes, overlaps
        raise SrganError(f"{path}: not a readable safetensors {what} ({first_line(error)})") from None
