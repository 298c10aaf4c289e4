"""Files: every one srgan writes goes through one atomic write that never
clobbers what it was not asked to; a lock keeps a run folder to one process;
torch files are read without running code and within their own size, and
the small files of a run folder only from regular files, within a limit."""

from srgan.files.atomic import DiskFull, check_output, write_bytes, write_file, write_text
from srgan.files.lock import RunLock
from srgan.files.reading import (
    looks_like_safetensors,
    parse_json,
    read_regular_bytes,
    read_regular_text,
    read_safetensors_file,
    read_torch_file,
)

__all__ = [
    "DiskFull",
    "RunLock",
    "check_output",
    "looks_like_safetensors",
    "parse_json",
    "read_regular_bytes",
    "read_regular_text",
    "read_safetensors_file",
    "read_torch_file",
    "write_bytes",
    "write_file",
    "write_text",
]
