"""SIGINT and SIGTERM end a run cleanly: the step under way finishes, the
loop saves `last.pt` and stops. A second signal stops at once."""
from __future__ import annotations

import signal


class TrainingInterrupted(Exception):
    """Raised by the loop after it saved the checkpoint; the CLI exits 128 + signum."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


class StopSignals:
    """While active, records SIGINT/SIGTERM instead of dying mid-step."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:  # asked twice: the user means it
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
        self.signum = signum

    def __enter__(self) -> "StopSignals":
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
