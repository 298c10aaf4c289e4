"""Faults a run of days meets: a full disk, SIGTERM to the whole process
group, a validation image that goes bad mid-run, a loss or weights that
stop being finite. The run says what happened on one line and keeps its last
good checkpoint."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import assert_refused, no_temporary_files, set_args, tiny_overrides
from srgan.training.state import load_checkpoint

PYTHON = sys.executable


def cli_command(*args):
    return [PYTHON, "-m", "srgan.cli", *map(str, args)]


def test_a_full_disk_mid_run_keeps_the_last_good_checkpoint(photo_dir, tmp_path):
    """A real full disk: the run folder on a small tmpfs that is filled up
    after the first checkpoint. The resumed run stops with "disk full at",
    leaves no temporary file, and last.pt is still the step-2 checkpoint."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small tmpfs")
    mount = tmp_path / "disk"
    mount.mkdir()
    run = mount / "run"
    train = " ".join(cli_command("train", *set_args(tiny_overrides(photo_dir, run, "data.val=null"))))
    resume = " ".join(
        cli_command(
            "train",
            "--resume",
            run,
            "--set",
            "train.max_steps=40",
            "--set",
            "train.epochs=100",
            "--set",
            "train.save_every=1",
        )
    )
    check = (
        f"{PYTHON} -c \"import torch; s = torch.load('{run}/checkpoints/last.pt', weights_only=True); "
        f"print('last_step', s['step'])\""
    )
    # room for a few checkpoints at first; then for ~2.5: each epoch keeps one (epoch_NNN.pt) until none fits
    script = (
        f"mount -t tmpfs -o size=4m tmpfs {mount} && {train} 2>/dev/null && "
        f"size=$(stat -c %s {run}/checkpoints/last.pt) && free=$(df --output=avail -B1 {mount} | tail -1) && "
        f"head -c $((free - 2 * size - size / 2)) /dev/zero > {mount}/filler; "
        f"{resume}; echo rc=$?; {check}; find {mount} -name '.*.tmp'"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    if "rc=" not in done.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()[-300:]}")
    assert "rc=2" in done.stdout, done
    assert ".tmp" not in done.stdout, done  # nothing left holding the space
    last_line = done.stderr.strip().splitlines()[-1]
    assert "disk full at" in last_line and "srgan train --resume" in last_line, done.stderr
    assert "Traceback" not in done.stderr and "Logging error" not in done.stderr, done.stderr
    saved = int(done.stdout.split("last_step")[1].split()[0])
    assert saved >= 2  # a good checkpoint, whichever one came last


def test_a_file_size_limit_is_a_disk_full_too(photo_dir, tmp_path):
    """RLIMIT_FSIZE makes the kernel refuse a write (EFBIG): the same path as
    a full disk, on any Linux, without a mount."""
    run = tmp_path / "run"
    first = subprocess.run(
        cli_command("train", *set_args(tiny_overrides(photo_dir, run))), capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    good = (run / "checkpoints" / "last.pt").read_bytes()
    limit = len(good) // 2

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = subprocess.run(
        cli_command("train", "--resume", run, "--set", "train.max_steps=6", "--set", "train.epochs=10"),
        capture_output=True,
        text=True,
        preexec_fn=small_files,
    )
    assert_refused(done, "disk full at")
    assert "last.pt" in done.stderr
    assert (run / "checkpoints" / "last.pt").read_bytes() == good
    assert not no_temporary_files(run)


def test_sigterm_to_the_whole_process_group_saves_and_exits_cleanly(photo_dir, tmp_path):
    """What Slurm and systemd do: SIGTERM to every process of the job,
    DataLoader workers included."""
    run = tmp_path / "run"
    args = set_args(
        tiny_overrides(
            photo_dir, run, "train.max_steps=100000", "train.epochs=100000", "data.workers=2", "data.cache_mb=0"
        )
    )
    process = subprocess.Popen(
        cli_command("train", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (
        (run / "metrics.jsonl").exists() and len((run / "metrics.jsonl").read_text().splitlines()) >= 3
    ):
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr and "srgan train --resume" in stderr.strip().splitlines()[-1], stderr
    assert load_checkpoint(run)["step"] >= 3


@pytest.mark.parametrize("val_every", [0, 2])  # at the epoch's end; every 2 steps, which is the epoch's last step
def test_a_validation_image_that_goes_bad_mid_run(srgan, photo_dir, val_dir, tmp_path, val_every):
    """The checkpoint of that step is written before the validation that
    fails; once the image is back, resuming does the validation it missed
    (and the end of the epoch it also missed, in the order of a run never stopped)."""
    val = tmp_path / "val"
    val.mkdir()
    image = val / "ihc.png"
    image.write_bytes((val_dir / "ihc.png").read_bytes())
    run = tmp_path / "run"
    base = tiny_overrides(
        photo_dir, run, f"data.val={val}", "train.epochs=10", "train.max_steps=4", f"train.val_every={val_every}"
    )
    from srgan.configs import load_config
    from srgan.training.loop import Trainer

    trainer = Trainer(load_config("demo", base))
    image.write_bytes(b"broken")  # after the start-up check, before the first validation
    try:
        with pytest.raises(Exception, match=r"ihc\.png: cannot be decoded"):
            trainer.fit(stop=type("NoSignal", (), {"signum": None})())
    finally:
        trainer.close()
    assert load_checkpoint(run)["step"] == 2  # saved before the validation
    image.write_bytes((val_dir / "ihc.png").read_bytes())
    assert srgan("train", "--resume", run).returncode == 0
    steps = [line.split(",")[1] for line in (run / "validation.csv").read_text().splitlines()[1:]]
    assert steps == ["2", "4"]


def test_a_non_finite_loss_names_the_step_and_every_term(srgan, photo_dir, tmp_path):
    run = tmp_path / "run"
    assert srgan("train", *set_args(tiny_overrides(photo_dir, run))).returncode == 0
    good = (run / "checkpoints" / "last.pt").read_bytes()
    result = srgan(
        "train",
        "--resume",
        run,
        "--set",
        "train.max_steps=8",
        "--set",
        "train.epochs=10",
        "--set",
        "loss.weights.image=1e308",
    )
    assert_refused(result, "step 3: g_loss is inf (d_loss")
    assert ", image " in result.stderr and ", adversarial " in result.stderr
    assert "the last checkpoint is kept" in result.stderr
    assert (run / "checkpoints" / "last.pt").read_bytes() == good


def test_weights_that_are_no_longer_finite_never_replace_a_checkpoint(photo_dir, tmp_path):
    from srgan.configs import load_config
    from srgan.training.logs import NonFiniteLoss
    from srgan.training.loop import Trainer, train

    config = load_config("demo", tiny_overrides(photo_dir, tmp_path / "run", "train.epochs=10"))
    run = train(config)
    good = {name: (run / "checkpoints" / name).read_bytes() for name in ("last.pt", "epoch_001.pt")}
    trainer = Trainer(config, resume=run)
    try:
        with torch.no_grad():
            trainer.parts.generator.tail.weight[0, 0, 0, 0] = float("nan")
        with pytest.raises(NonFiniteLoss, match="step 2: the generator's weights are no longer finite"):
            trainer.checkpoint(best=True, keep_epoch=True)
    finally:
        trainer.close()
    for name, data in good.items():
        assert (run / "checkpoints" / name).read_bytes() == data
    assert not (run / "checkpoints" / "best.pt").exists()
