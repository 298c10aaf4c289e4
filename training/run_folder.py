"""The run folder: what is in it, who may write it, and what a new or a
resumed run finds there.

A folder holds a run once it has `checkpoints/last.pt`. One with only
config.yaml and logs is a run that stopped before its first checkpoint (a
crash, a kill, a bad image found late): a new run in that folder, or a
resume of it, starts it afresh instead of refusing it."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path

import torch

from srgan.configs import Config, config_to_yaml
from srgan.files import RunLock, check_output, parse_json, read_regular_text, write_text
from srgan.files.errors import SrganError, first_line
from srgan.files.inputs import own
from srgan.files.reading import check_regular
from srgan.models.precision_choice import PrecisionChoice
from srgan.models.runtime import DTYPES, fast_bf16

log = logging.getLogger("srgan")

# What a run writes besides its checkpoints (cleared when a folder is started afresh).
RUN_FILES = ("metrics.jsonl", "epochs.csv", "validation.csv", "curves.png", "train.log", "run.json")
STATUS_NAME = "run.json"
STATUS_BYTES = 1 << 16  # run.json is a few hundred bytes: a larger one is not srgan's
# run.json's states; "running" in the file with nobody holding the lock means
# the process died without a word (SIGKILL, a power cut).
STATES = ("running", "finished", "interrupted", "failed")


class RunFolder:
    """A run folder, locked by this process from `open` to `close`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.lock = RunLock(self.path)

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoints / "last.pt"

    def has_checkpoint(self) -> bool:
        return self.last.is_file()

    def open(self, resuming: bool) -> bool:
        """Lock the folder. Raises SrganError for a path that is a file and,
        for a new run, for a folder that already holds one. Returns whether
        there is a checkpoint to resume from (False for a new run, and for a
        resumed one that stopped before its first checkpoint)."""
        if self.path.exists() and not self.path.is_dir():
            raise SrganError(f"train.run_dir: {self.path} is a file, not a folder")
        if resuming:  # its checkpoint, config and logs are the run's own: read to continue, replaced as it goes
            own(self.path)
        else:  # the run replaces a config.yaml there with its own, so that file must not be the --config it reads
            check_output(self.path / "config.yaml", overwrite=True)
        self.lock.acquire()
        try:
            if not resuming and self.has_checkpoint():
                raise SrganError(
                    f"train.run_dir: {self.path} already holds a run; resume it with --resume, or choose another folder"
                )
            started = self.has_checkpoint()
            if started:
                self.check_run_files()
            if not started and (self.path / "config.yaml").exists():
                log.info("%s: an earlier run stopped before its first checkpoint; starting it afresh", self.path)
                for name in RUN_FILES:
                    (self.path / name).unlink(missing_ok=True)
            self.remove_temporary_files()
        except BaseException:
            self.lock.release()
            raise
        return started

    def write_config(self, config: Config) -> None:
        """The resolved config, once the run has checked everything it resumes from."""
        write_text(self.path / "config.yaml", config_to_yaml(config), overwrite=True)

    def write_status(
        self, state: str, step: int, planned: int, wall_seconds: float, reason: str = "", extra: dict | None = None
    ) -> None:
        """run.json: where the run stands, for `srgan runs` (small, rewritten
        atomically at every checkpoint and when the process ends), with
        `extra`'s keys: what the run chose (its precision, its micro-batch)."""
        status = {
            "state": state,
            "step": step,
            "planned_steps": planned,
            "wall_seconds": round(wall_seconds, 1),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "updated": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        if reason:
            status["reason"] = reason
        status.update(extra or {})
        write_text(self.path / STATUS_NAME, json.dumps(status) + "\n", overwrite=True)

    def check_run_files(self) -> None:
        """Raise SrganError unless each file a resumed run reads and appends
        to is a regular file, or absent: appending to a FIFO waits for a
        reader for ever, and a link to nothing would have the log written
        where it points."""
        for name in RUN_FILES:
            path = self.path / name
            if not os.path.lexists(path):
                continue
            try:
                check_regular(path, os.stat(path).st_mode)
            except OSError as error:
                raise SrganError(
                    f"{path}: a link to nothing ({error.strerror}); remove it to resume this run"
                ) from None
            except SrganError as error:
                raise SrganError(f"{error}; remove it to resume this run") from None

    def remove_temporary_files(self) -> None:
        """Temporary files of a writer that was killed mid-write: they hold
        disk space and nobody else writes here (the folder is locked)."""
        for folder in (self.path, self.checkpoints, self.path / "samples"):
            if folder.is_dir():
                for tmp in folder.glob(".*.tmp"):
                    tmp.unlink(missing_ok=True)

    def close(self) -> None:
        self.lock.release()


def recorded_precision(run_dir: Path, device: torch.device) -> PrecisionChoice:
    """The precision run.json records for the run in `run_dir`, for its
    resume under precision auto: the run goes on in the precision it started
    in, so that it stays bit-exact. A run.json without one (written before
    srgan recorded it, or unreadable) gets auto's rule of those versions,
    the device's flags (models/runtime.py fast_bf16), with a warning."""
    path = run_dir / STATUS_NAME
    try:
        status = parse_json(read_regular_text(path, STATUS_BYTES, "run status"))
        record = status.get("precision") if isinstance(status, dict) else None
        why = "records no precision"
    except (SrganError, OSError, ValueError) as error:
        record, why = None, f"unreadable ({first_line(error)})"
    if isinstance(record, dict) and record.get("precision") in DTYPES:
        check_runs(record["precision"], device, path)
        seconds = record.get("seconds")
        kept = {k: v for k, v in seconds.items() if isinstance(v, float)} if isinstance(seconds, dict) else {}
        return PrecisionChoice(record["precision"], "the run's own, kept", kept, str(record.get("unit", "a step")))
    precision = "bf16" if fast_bf16(device) else "fp32"
    log.warning(
        "%s %s: the run goes on in %s, auto's choice by the device's flags before it timed",
        path,
        why,
        precision,
    )
    return PrecisionChoice(precision, "the device's flags, as the run started", {}, "a step")


def check_runs(precision: str, device: torch.device, path: Path) -> None:
    """Raise SrganError when the device cannot run the precision the run
    recorded (a resume on another machine), saying how to go on."""
    cuda = device.type == "cuda"
    if (precision == "fp16" and not cuda) or (precision == "bf16" and cuda and not torch.cuda.is_bf16_supported()):
        raise SrganError(
            f"{path}: the run trained in {precision}, which {device.type} here does not run; "
            "resume it with --set train.precision=fp32 (or another the device runs)"
        )
