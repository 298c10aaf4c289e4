"""Interruptions a real run meets: Ctrl-C, a polite kill, a hard kill."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import run_cli, set_args, tiny_overrides
from srgan.training.state import load_checkpoint


def start_training(photo_dir, run_dir, *extra):
    args = set_args(
        tiny_overrides(photo_dir, run_dir, "train.max_steps=100000", "train.epochs=100000", "data.workers=1", *extra)
    )
    return subprocess.Popen(
        [sys.executable, "-m", "srgan.cli", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def wait_for_rows(path, count, process, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    raise AssertionError("training logged nothing in time")


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_saves_last_pt_and_prints_the_resume_command(photo_dir, tmp_path, signum, code):
    run_dir = tmp_path / "run"
    process = start_training(photo_dir, run_dir)
    wait_for_rows(run_dir / "metrics.jsonl", 3, process)
    # Ctrl-C reaches the whole process group, DataLoader workers included
    os.killpg(process.pid, signum) if signum == signal.SIGINT else process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    assert f"srgan train --resume {run_dir}" in stderr
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    logged = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert state["step"] == logged[-1] >= 3  # nothing trained after the last save
    if signum == signal.SIGINT:
        resumed = run_cli("train", "--resume", str(run_dir), "--set", f"train.max_steps={state['step'] + 2}")
        assert resumed.returncode == 0, resumed.stderr
        steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert steps == list(range(1, state["step"] + 3))  # no duplicate, no gap


WRITER = """
import sys, torch
from srgan.models import save_checkpoint
path = sys.argv[1]
for i in range(10**6):
    save_checkpoint(path, {"step": i, "weights": torch.full((8_000_000,), float(i))})
    print("saved", i, flush=True)
"""


def test_sigkill_while_writing_never_leaves_a_truncated_last_pt(tmp_path):
    path = tmp_path / "last.pt"
    for delay in (0.0, 0.05, 0.13, 0.21):
        process = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().startswith("saved")
        time.sleep(delay)
        process.kill()
        process.wait()
        state = torch.load(path, weights_only=True)
        assert state["weights"][0].item() == state["step"] and state["weights"].numel() == 8_000_000
