"""SIGINT and SIGTERM end a run cleanly: the step under way finishes, the
loop saves `last.pt` and stops. A second signal stops at once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

# Under torchrun a Ctrl-C reaches each rank twice: from the terminal, to the
# whole process group, and forwarded by the launcher a moment later. A
# repeat within this many seconds is that echo, not the user insisting.
ECHO_SECONDS = 3.0


class TrainingInterrupted(Exception):
    """The loop raises it once it has saved the checkpoint; the CLI exits 128 + signum."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


class StopSignals:
    """While active, records SIGINT/SIGTERM instead of dying mid-step."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._first_at = 0.0
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            if time.monotonic() - self._first_at < ECHO_SECONDS:
                return  # the launcher's echo of the same request
            signal.signal(signum, signal.SIG_DFL)  # asked twice: the user means it
            signal.raise_signal(signum)
        self.signum, self._first_at = signum, time.monotonic()

    def __enter__(self) -> StopSignals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def ignore_interrupts_in_worker(_worker_id: int) -> None:
    """DataLoader workers share the training process's group, so Ctrl-C, and
    the SIGTERM that Slurm and systemd send to the whole group, reach them
    too. They leave the decision to the training process (and exit on their
    own when it is gone: the DataLoader's watchdog checks their parent)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
