"""Whether a process recorded by pid is still running: a run folder's lock
holder, the writer of a temporary file."""

from __future__ import annotations

import os
from typing import TypeGuard

PID_LIMIT = 1 << 22  # Linux's PID_MAX_LIMIT: every pid is below it


def valid_pid(pid: object) -> TypeGuard[int]:
    """Whether a process can have this pid: 0 and negative pids would make
    os.kill probe a process group (and succeed), a huge one overflows it."""
    return isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < PID_LIMIT


def process_alive(pid: object) -> bool:
    """Whether process `pid` of this machine runs (someone else's counts)."""
    if not valid_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
