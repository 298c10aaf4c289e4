"""The random number generators' states (Python's, NumPy's, torch's CPU and
CUDA ones), as a checkpoint stores them and as a step run again after an
out-of-memory error restores them."""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state() -> dict:
    numpy_state = np.random.get_state()
    assert isinstance(numpy_state, tuple)  # legacy=True, the default: MT19937's tuple
    state = {
        "python": random.getstate(),
        "numpy": [numpy_state[0], numpy_state[1].tolist(), *numpy_state[2:]],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(as_tuples(state["python"]))
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def as_tuples(value):
    """random.setstate wants the tuples that a round trip may have turned into lists."""
    return tuple(as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
