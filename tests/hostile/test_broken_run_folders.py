"""Run folders as a crash, a full disk, a copy tool or a person leaves
them: `srgan runs` and `srgan plot` report each broken one on one line and
go on with the others; nothing hangs on a FIFO, reads a device without
bound, or ends in a traceback; `srgan train --resume` refuses such a folder
on one line."""

from __future__ import annotations

import json
import math
import os
import pickle
import resource
import shutil
import signal
import socket
import subprocess
import warnings

import pytest
from PIL import Image

from conftest import assert_refused, skimage_photo

NESTED = "[" * 100000  # json.loads raises RecursionError on it


class Hung(BaseException):
    """Raised by the alarm in a command that did not return in time (no
    `except Exception` in srgan can swallow it)."""


@pytest.fixture
def srgan_bounded(srgan):
    """`srgan ARGS` in this process, failing instead of stalling the suite
    or taking the machine's memory: an alarm for a hang (opening a FIFO
    waits for a writer), an address-space limit 1 GiB above what the
    process has mapped for a read without end (a link to /dev/zero)."""

    def run(*args, seconds: int = 120) -> subprocess.CompletedProcess:
        def hung(signum, frame):
            raise Hung(f"srgan {' '.join(map(str, args))}: still running after {seconds} s")

        mapped = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize")) * 1024
        limits = resource.getrlimit(resource.RLIMIT_AS)
        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(seconds)
        resource.setrlimit(resource.RLIMIT_AS, (min(mapped + (1 << 30), limits[1]), limits[1]))
        try:
            return srgan(*args)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, limits)
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)

    return run


def copy_run(tiny_run, folder):
    """A private copy of the finished tiny run, its lock left behind."""
    shutil.copytree(tiny_run, folder, ignore=shutil.ignore_patterns(".lock"))
    (folder / "config.yaml").write_text((folder / "config.yaml").read_text().replace(str(tiny_run), str(folder)))
    return folder


def set_status(run, **changes):
    status = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**status, **changes}))


def replace_with(path, kind):
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(kind)  # a device: /dev/zero, /dev/urandom


def prepend(path, text):
    path.write_text(text + path.read_text())


def forge_lock(run, pid):
    (run / ".lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "since": "2024-01-01 00:00:00"}))


# name -> (damage, what the one line about it says)
BROKEN = {
    "fifo_lock": (lambda run: replace_with(run / ".lock", "fifo"), ".lock: not a regular file"),
    "fifo_metrics": (lambda run: replace_with(run / "metrics.jsonl", "fifo"), "metrics.jsonl: not a regular file"),
    "fifo_validation": (lambda run: replace_with(run / "validation.csv", "fifo"), "validation.csv: not a regular file"),
    "zero_metrics": (lambda run: replace_with(run / "metrics.jsonl", "/dev/zero"), "metrics.jsonl: not a regular file"),
    "urandom_validation": (
        lambda run: replace_with(run / "validation.csv", "/dev/urandom"),
        "validation.csv: not a regular file",
    ),
    "fifo_status": (lambda run: replace_with(run / "run.json", "fifo"), "run.json: not a regular file"),
    "fifo_config": (lambda run: replace_with(run / "config.yaml", "fifo"), "config.yaml: not a regular file"),
    "step_text": (lambda run: set_status(run, step="abc"), "run.json: step: expected"),
    "step_huge_float": (lambda run: set_status(run, step=1e308), "run.json: step: expected"),
    "planned_bool": (lambda run: set_status(run, planned_steps=True), "run.json: planned_steps: expected"),
    "wall_nan": (lambda run: set_status(run, wall_seconds=float("nan")), "run.json: wall_seconds: expected"),
    "state_unknown": (lambda run: set_status(run, state=5), "run.json: state: expected"),
    "nested_status": (
        lambda run: (run / "run.json").write_text(NESTED[:50000]),  # within run.json's size limit
        "run.json: damaged (nested too deeply)",
    ),
    "nested_metrics": (
        lambda run: prepend(run / "metrics.jsonl", NESTED + "\n"),
        "metrics.jsonl: line 1 is not a metrics row (nested too deeply)",
    ),
}
# A lock that no live process can hold: the run it records as running died.
FORGED_PIDS = {"pid_huge": 10**30, "pid_negative": -1, "pid_zero": 0, "pid_text": "1", "pid_nested": NESTED[:4000]}


def make_broken(tiny_run, root, name):
    run = copy_run(tiny_run, root / name)
    BROKEN[name][0](run)
    return run


def make_killed(tiny_run, root, name):
    """A run whose run.json says "running" and whose lock names no live process."""
    run = copy_run(tiny_run, root / name)
    set_status(run, state="running")
    if name == "pid_nested":
        (run / ".lock").write_text(FORGED_PIDS[name])
    else:
        forge_lock(run, FORGED_PIDS[name])
    return run


def rows_of(result) -> dict[str, dict]:
    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    return {row["name"]: row for row in json.loads(result.stdout, parse_constant=no_constants)}


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_run_folder_is_one_line_of_srgan_runs(srgan_bounded, tiny_run, tmp_path, name):
    make_broken(tiny_run, tmp_path, name)
    copy_run(tiny_run, tmp_path / "good")
    result = srgan_bounded("runs", tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    problems = [line for line in result.stdout.splitlines() if line.startswith(str(tmp_path / name) + ":")]
    assert len(problems) == 1 and BROKEN[name][1] in problems[0], result.stdout
    rows = {line.split()[0]: line.split()[3] for line in result.stdout.splitlines()[2:] if not line.startswith("/")}
    assert rows == {"good": "finished", name: "broken"}, result.stdout


@pytest.mark.parametrize("name", FORGED_PIDS)
def test_a_lock_that_no_live_process_can_hold_is_not_a_running_run(srgan, tiny_run, tmp_path, name):
    """A pid too large for the kernel (OverflowError in os.kill), 0 or -1
    (os.kill signals a process group, or every process, and succeeds), not
    an integer, or a record nested too deeply to parse."""
    make_killed(tiny_run, tmp_path, name)
    result = srgan("runs", tmp_path, "--json")
    assert result.returncode == 0, result
    assert rows_of(result)[name]["state"] == "killed", result.stdout
    table = srgan("runs", tmp_path)
    assert table.returncode == 0 and "killed" in table.stdout, table


def test_srgan_runs_over_a_tree_of_broken_folders_lists_the_good_run(srgan_bounded, tiny_run, tmp_path):
    copy_run(tiny_run, tmp_path / "good")
    for name in BROKEN:
        make_broken(tiny_run, tmp_path, name)
    for name in FORGED_PIDS:
        make_killed(tiny_run, tmp_path, name)
    result = srgan_bounded("runs", tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    lines = result.stdout.splitlines()
    states = {line.split()[0]: line.split()[3] for line in lines[2:] if not line.startswith("/")}
    assert states == {
        "good": "finished",
        **{name: "broken" for name in BROKEN},
        **{name: "killed" for name in FORGED_PIDS},
    }, result.stdout
    assert lines[2].split()[0] == "good"  # best PSNR first (the killed copies tie with it: by name)
    problems = [line for line in lines if line.startswith("/")]
    assert len(problems) == len(BROKEN), result.stdout
    for name, (_, message) in BROKEN.items():
        assert [line for line in problems if line.startswith(f"{tmp_path / name}:")][0].count(message) == 1, name
    assert len(lines) == 2 + 1 + len(BROKEN) + len(FORGED_PIDS) + len(BROKEN)


def test_srgan_runs_json_writes_null_for_nan_and_never_picks_nan_as_best(srgan, tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "nan")
    validation = (run / "validation.csv").read_text().splitlines()
    epoch, step, *_ = validation[-1].split(",")
    # a NaN row first (max() keeps the first of incomparable values) and an infinite one
    (run / "validation.csv").write_text(
        "\n".join([validation[0], f"{epoch},{step},nan,nan,nan,nan", f"{epoch},{step},inf,1,inf,1", *validation[1:]])
        + "\n"
    )
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"epoch": 1, "step": 2, "g_loss": float("nan"), "d_loss": float("inf")}) + "\n")
    result = srgan("runs", tmp_path, "--json")
    assert result.returncode == 0, result
    row = rows_of(result)["nan"]
    finite = float(validation[-1].split(",")[2])
    assert row["best_psnr"] == pytest.approx(finite, abs=1e-4) and math.isfinite(row["bicubic_psnr"])
    assert row["g_loss"] is None and row["d_loss"] is None and row["state"] == "finished"
    table = srgan("runs", tmp_path)
    assert table.returncode == 0 and f"{finite:.2f} /" in table.stdout, table


@pytest.mark.parametrize("name", ["fifo_lock", "nested_metrics", "zero_metrics", "fifo_validation"])
def test_resuming_a_broken_run_folder_is_refused_on_one_line(srgan_bounded, tiny_run, tmp_path, name):
    run = make_broken(tiny_run, tmp_path, name)
    result = srgan_bounded("train", "--resume", run, "--set", "train.max_steps=4", "--set", "train.epochs=10")
    assert_refused(result, BROKEN[name][1])


@pytest.mark.parametrize("name, kind", [("train.log", "fifo"), ("epochs.csv", "fifo"), ("train.log", "dangling")])
def test_resuming_refuses_a_run_file_it_would_append_to_that_is_no_regular_file(
    srgan_bounded, tiny_run, tmp_path, name, kind
):
    """train.log is only appended to: a FIFO in its place blocked the resumed
    run for ever, a dangling link had the log written where it points."""
    run = copy_run(tiny_run, tmp_path / "run")
    replace_with(run / name, "fifo" if kind == "fifo" else tmp_path / "elsewhere.log")
    before = {p.name for p in run.iterdir()}
    result = srgan_bounded("train", "--resume", run, "--set", "train.max_steps=4", "--set", "train.epochs=10")
    assert_refused(result, f"{name}: ")
    assert "remove it to resume" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "elsewhere.log").exists() and {p.name for p in run.iterdir()} - {".lock"} == before


def test_a_lock_left_nested_too_deeply_is_taken_over(srgan, tiny_run, tmp_path):
    run = make_killed(tiny_run, tmp_path, "pid_nested")
    result = srgan("train", "--resume", run, "--set", "train.max_steps=4", "--set", "train.epochs=10")
    assert result.returncode == 0, result
    assert json.loads((run / ".lock").read_text() or "{}") == {}  # released


def test_a_symlinked_lock_is_refused_and_its_target_left_alone(srgan, tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run")
    target = tmp_path / "precious.txt"
    target.write_text("mine\n")
    (run / ".lock").symlink_to(target)
    result = srgan("train", "--resume", run, "--set", "train.max_steps=4", "--set", "train.epochs=10")
    assert_refused(result, ".lock: a symbolic link")
    assert target.read_text() == "mine\n"


def test_srgan_plot_skips_a_broken_run_and_draws_the_others(srgan_bounded, tiny_run, tmp_path):
    root = tmp_path / "runs"
    for name in ("good", "other"):
        copy_run(tiny_run, root / name)
    for name in ("fifo_metrics", "fifo_validation", "nested_metrics"):
        make_broken(tiny_run, root, name)
    out = tmp_path / "all.png"
    result = srgan_bounded("plot", root, "-o", out)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result
    assert out.is_file()
    skipped = [line for line in result.stderr.splitlines() if "skipping" in line]
    assert len(skipped) == 3, result.stderr
    for name in ("fifo_metrics", "fifo_validation", "nested_metrics"):
        assert sum(str(root / name) in line and BROKEN[name][1] in line for line in skipped) == 1, name
    # only broken runs: one line
    for name in ("good", "other"):
        shutil.rmtree(root / name)
    result = srgan_bounded("plot", root, "-o", tmp_path / "none.png")
    assert_refused(result, "no run to draw")
    assert not (tmp_path / "none.png").exists()
    # one broken run named: its problem is the error
    result = srgan_bounded("plot", root / "fifo_validation", "-o", tmp_path / "one.png")
    assert_refused(result, "validation.csv: not a regular file")


def test_refusing_a_legacy_pickle_is_one_line_without_torch_warning(srgan, tmp_path):
    """A plain pickle (protocol 4) goes to torch's legacy loader, whose
    weights-only unpickler warns about the protocol before it refuses."""

    class Planted:
        def __reduce__(self):
            return (print, ("ran",))

    path = tmp_path / "legacy.pt"
    path.write_bytes(pickle.dumps({"generator": Planted()}, protocol=4))
    image = tmp_path / "p.png"
    Image.fromarray(skimage_photo("coffee")[:32, :32]).save(image)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = srgan("upscale", image, "-k", path, "-o", tmp_path / "out")
    assert_refused(result, "legacy.pt: not a readable checkpoint")
    assert [str(w.message) for w in caught if "pickle protocol" in str(w.message)] == []
