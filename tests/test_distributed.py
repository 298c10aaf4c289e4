"""Under torchrun: 2 CPU processes (gloo) train one run, in step, with the
numbers of one process; a signal or a dead rank stops them all cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import set_args, tiny_overrides
from srgan.configs import load_config
from srgan.training import train
from srgan.training.state import load_checkpoint

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def torchrun(*args, **options):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [*TORCHRUN, "-m", "srgan.cli", *args], capture_output=True, text=True, env=env, timeout=300, **options
    )


def descendants(pid: int) -> list[int]:
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def two_ranks_and_one(photo_dir, tmp_path, settings: list[str]):
    """The run of `settings` on two ranks of 2 crops (torchrun) and in one
    process of 4: their run folders."""
    two = tmp_path / "two"
    done = torchrun("train", *set_args(tiny_overrides(photo_dir, two, *settings, "data.batch_size=2")))
    assert done.returncode == 0, done.stderr[-3000:]
    one = train(load_config("demo", tiny_overrides(photo_dir, tmp_path / "one", *settings, "data.batch_size=4")))
    return two, one


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_ranks_train_one_run_in_step_and_resume_on_one(photo_dir, val_dir, tmp_path):
    run = tmp_path / "run"
    extra = [
        f"data.val={val_dir}",
        "train.max_steps=6",
        "train.epochs=10",
        "train.pretrain_steps=2",
        "data.repeat=4",
        "data.batch_size=2",
        "data.workers=1",
    ]
    done = torchrun("train", *set_args(tiny_overrides(photo_dir, run, *extra)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the 2 ranks hold the same weights" in done.stderr  # checked at every checkpoint, else it stops
    assert "2 ranks (gloo), data.batch_size 2 a rank: 4 crops a step" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # one run folder
    logged = rows(run)
    assert [r["step"] for r in logged] == [1, 2, 3, 4, 5, 6] and all(r["world_size"] == 2 for r in logged)
    assert not (run / ".lock").read_text()  # released
    # the checkpoint holds plain state dicts: one process resumes it
    state = load_checkpoint(run)
    assert not any(key.startswith("module.") for key in state["generator"])
    resumed = train(load_config(str(run / "config.yaml"), ["train.max_steps=8", "data.workers=0"]), resume=run)
    assert [r["step"] for r in rows(resumed)] == list(range(1, 9)) and rows(resumed)[-1]["world_size"] == 1
    # 6 steps of 4 crops an epoch of 3 steps, then one process of batch 2: it goes on from key 12 of epoch 3
    assert load_checkpoint(run)["epoch"] == 3


@pytest.mark.parametrize(
    "generator",
    [["model.norm=none"], ["model.arch=rrdb", "model.growth=4"], ["model.arch=compact", "model.blocks=2"]],
    ids=["srresnet", "rrdb", "compact"],
)
def test_a_two_rank_step_is_a_one_process_step_on_twice_the_batch(photo_dir, tmp_path, generator):
    """A generator without BatchNorm (srresnet with model.norm: none; rrdb
    and compact have none), generator-only steps: DDP's averaged gradients
    are the gradient of the whole batch. With BatchNorm each rank normalises
    its own share (SyncBatchNorm, CUDA only, would make it the whole
    batch's), so GAN steps are not compared."""
    common = [
        *generator,
        "loss.weights.adversarial=0",
        "train.max_steps=3",
        "data.repeat=8",
        "train.lr_schedule.milestones=[]",
        "train.lr_g=1e-3",
    ]
    two, one = two_ranks_and_one(photo_dir, tmp_path, common)
    a, b = load_checkpoint(two)["generator"], load_checkpoint(one)["generator"]
    for name, tensor in a.items():
        assert torch.allclose(tensor, b[name], atol=1e-5, rtol=1e-4), name
    assert [r["g_loss"] for r in rows(two)] == pytest.approx([r["g_loss"] for r in rows(one)], rel=1e-4)


@pytest.mark.parametrize("fault", ["sigterm-launcher", "kill-a-rank"])
def test_a_signal_or_a_dead_rank_stops_every_rank_with_the_checkpoint_intact(photo_dir, tmp_path, fault):
    run = tmp_path / "run"
    args = set_args(
        tiny_overrides(
            photo_dir,
            run,
            "train.max_steps=100000",
            "train.epochs=100000",
            "data.repeat=50",
            "data.batch_size=2",
            "train.save_every=5",
        )
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launcher = subprocess.Popen(
        [*TORCHRUN, "-m", "srgan.cli", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not ((run / "checkpoints" / "last.pt").exists() and len(rows(run)) >= 12):
        assert launcher.poll() is None, launcher.communicate()
        time.sleep(0.1)
    ranks = [pid for pid in descendants(launcher.pid) if "srgan.cli" in Path(f"/proc/{pid}/cmdline").read_text()]
    assert len(ranks) >= 2  # the two ranks (and perhaps their DataLoader workers)
    if fault == "sigterm-launcher":
        launcher.send_signal(signal.SIGTERM)  # torchrun passes it to the ranks; they agree on a step and save
    else:
        os.kill(ranks[-1], signal.SIGKILL)  # a rank dies: the other's collective fails, torchrun stops it
    _, stderr = launcher.communicate(timeout=120)
    assert all(not Path(f"/proc/{pid}").exists() for pid in ranks), "a rank is left running"
    state = load_checkpoint(run)  # loads: never half written
    if fault == "sigterm-launcher":
        assert "srgan train --resume" in stderr and state["step"] == rows(run)[-1]["step"]
    else:
        assert "the job's process group broke" in stderr
        assert state["step"] % 5 == 0  # the last save_every checkpoint


def test_an_error_every_rank_meets_is_printed_once(photo_dir, tmp_path):
    """A mistake every rank meets (an input that is not there), or one rank 0
    refuses for all (a run folder that is a file), is one line on the
    terminal, not one a rank."""
    (tmp_path / "a file").write_text("mine")
    for train_dir, run_dir, culprit in [
        (tmp_path / "missing", tmp_path / "run", "missing: no such folder"),
        (photo_dir, tmp_path / "a file", "a file is a file, not a folder"),
    ]:
        done = torchrun("train", *set_args(tiny_overrides(train_dir, run_dir)))
        assert done.returncode != 0
        errors = [line for line in done.stderr.splitlines() if line.startswith("srgan: error:")]
        assert len(errors) == 1 and culprit in errors[0], done.stderr[-3000:]
    assert (tmp_path / "a file").read_text() == "mine" and not (tmp_path / "run").exists()
