"""Run folders: inputs are checked before a folder is touched, a run that
died before its first checkpoint is taken up again, and one process at a
time writes a run folder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from PIL import Image

from conftest import assert_refused, assert_unchanged, set_args, skimage_photo, snapshot, tiny_overrides
from srgan.files import RunLock
from srgan.training.state import load_checkpoint


def truncated_png(path, size=96):
    """A PNG whose header is fine and whose pixels are cut off: it breaks only when decoded."""
    Image.fromarray(skimage_photo("astronaut")[:size, :size]).save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def test_bad_inputs_are_refused_before_a_run_folder_exists(srgan, photo_dir, tmp_path):
    broken_val = tmp_path / "val"
    broken_val.mkdir()
    truncated_png(broken_val / "a.png")
    run = tmp_path / "run"
    for extra, culprit in (
        ([f"data.val={broken_val}"], "data.val: none of the 1 images can be decoded"),
        (
            ["loss.weights.perceptual=0.01", "loss.perceptual.layer=pool5", "data.crop_size=16"],
            "data.crop_size: expected at least 32 px: loss.perceptual.layer pool5 comes after 5",
        ),
        (["data.val_max_size=12"], "data.val_max_size"),
    ):
        assert_refused(srgan("train", *set_args(tiny_overrides(photo_dir, run, *extra))), culprit)
        assert not run.exists()


def test_a_broken_validation_image_among_good_ones_is_skipped(srgan, photo_dir, val_dir, tmp_path):
    val = tmp_path / "val"
    val.mkdir()
    (val / "good.png").write_bytes((val_dir / "ihc.png").read_bytes())
    truncated_png(val / "broken.png")
    result = srgan("train", *set_args(tiny_overrides(photo_dir, tmp_path / "run", f"data.val={val}")))
    assert result.returncode == 0, result
    assert "skipping" in result.stderr and "broken.png" in result.stderr


def test_a_folder_without_a_checkpoint_is_started_afresh(srgan, photo_dir, tmp_path):
    """What a run killed before its first checkpoint leaves: a config and logs."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("name: old\n")
    (run / "metrics.jsonl").write_text('{"epoch": 1, "step": 1, "g_loss": 9.0}\n{"epo')
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / ".last.pt.999.abcd.tmp").write_bytes(b"x" * 1000)  # a killed writer's
    result = srgan("train", *set_args(tiny_overrides(photo_dir, run)))
    assert result.returncode == 0, result
    assert "stopped before its first checkpoint; starting it afresh" in result.stderr
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert not list(run.rglob(".*.tmp"))
    # --resume takes such a folder too
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text((run / "config.yaml").read_text().replace(str(run), str(fresh)))
    result = srgan("train", "--resume", fresh)
    assert result.returncode == 0, result
    assert load_checkpoint(fresh)["step"] == 2


def test_a_locked_run_folder_is_refused_by_name_and_a_stale_lock_taken_over(srgan, photo_dir, tmp_path):
    run = tmp_path / "run"
    assert srgan("train", *set_args(tiny_overrides(photo_dir, run))).returncode == 0
    before = snapshot(run)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from srgan.files import RunLock; RunLock(sys.argv[1]).acquire(); "
                "print('locked', flush=True); time.sleep(120)"
            ),
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = srgan("train", "--resume", run, "--set", "train.max_steps=4", "--set", "train.epochs=10")
        assert_refused(result, f"the run folder is in use by process {holder.pid}")
        assert_unchanged({p: d for p, d in before.items() if p.name != ".lock"})
    finally:
        holder.kill()
        holder.wait()
    # the holder died without unlocking: its lock is stale
    result = srgan("train", "--resume", run, "--set", "train.max_steps=4", "--set", "train.epochs=10")
    assert result.returncode == 0, result
    assert f"taking over the stale lock of process {holder.pid}" in result.stderr
    assert load_checkpoint(run)["step"] == 4


def test_two_resumes_at_once_one_refused_no_duplicate_rows(photo_dir, tmp_path):
    run = tmp_path / "run"
    first = subprocess.run(
        [sys.executable, "-m", "srgan.cli", "train", *set_args(tiny_overrides(photo_dir, run))],
        capture_output=True,
        text=True,
    )
    assert first.returncode == 0, first.stderr
    command = [
        sys.executable,
        "-m",
        "srgan.cli",
        "train",
        "--resume",
        str(run),
        "--set",
        "train.max_steps=150",
        "--set",
        "data.repeat=50",
        "--set",
        "train.epochs=100",
    ]
    both = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in both]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    refused = next(err for code, err in results if code == 2)
    assert "in use by process" in refused and "Traceback" not in refused
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 151))
    assert load_checkpoint(run)["step"] == 150


def test_the_lock_file_records_its_holder(tmp_path):
    lock = RunLock(tmp_path).acquire()
    record = json.loads((tmp_path / ".lock").read_text())
    assert record["pid"] == os.getpid()
    with pytest.raises(Exception, match="in use by process"):
        RunLock(tmp_path).acquire()  # a second lock, even in the same process
    lock.release()
    RunLock(tmp_path).acquire().release()


def test_a_process_refused_while_the_holder_writes_its_record_still_names_it(tmp_path):
    # The holder takes the flock, then writes who it is: a second process in
    # between used to read an empty file and say "another process".
    import fcntl
    import threading

    holder_fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": "now"}).encode()
    writer = threading.Timer(0.1, lambda: os.pwrite(holder_fd, record, 0))
    writer.start()
    try:
        with pytest.raises(Exception, match=f"in use by process {os.getpid()} "):
            RunLock(tmp_path).acquire()
    finally:
        writer.join()
        os.close(holder_fd)


def test_a_run_folder_that_cannot_be_one(srgan, photo_dir, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("mine")
    assert_refused(srgan("train", *set_args(tiny_overrides(photo_dir, blocker))), "is a file, not a folder")
    assert_refused(
        srgan("train", *set_args(tiny_overrides(photo_dir, blocker / "run"))), "cannot be used as a run folder"
    )
    assert blocker.read_text() == "mine"
    assert_refused(srgan("train", "--resume", blocker), "not a run folder")
