"""Reading files that anyone may hand us: checkpoints and weight files."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from srgan.configs.errors import SrganError, first_line


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
            reasons = [line.strip() for line in text.splitlines()
                       if line.strip() and not line.startswith(("Weights only", "Please file", "Check the doc"))]
            reason = f"{error.__class__.__name__}: {reasons[0]}" if reasons else error.__class__.__name__
        else:
            reason = first_line(error)
        raise SrganError(f"{path}: not a readable {what} ({reason})") from None
