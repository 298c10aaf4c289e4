"""Experiments: `srgan runs` lists and ranks runs, `srgan plot` overlays them,
`srgan train --sweep` runs a grid of variants and resumes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from PIL import Image

from conftest import interrupt_at, set_args, tiny_overrides
from srgan.configs import load_config
from srgan.training import train
from srgan.training.runs import run_labels
from srgan.training.sweep import parse_sweep, variants_of


@pytest.fixture(scope="module")
def runs_folder(photo_dir, val_dir, tmp_path_factory):
    """Three finished runs that differ in the generator's learning rate, one
    interrupted run, one killed run and two broken folders."""
    root = tmp_path_factory.mktemp("runs")

    def config(name, *extra):
        return load_config(
            "demo",
            tiny_overrides(
                photo_dir, root / name, f"data.val={val_dir}", "train.epochs=10", "train.max_steps=4", *extra
            ),
        )

    for lr in ("1e-2", "1e-3", "1e-4"):
        train(config(f"lr{lr}", f"train.lr_g={lr}"))
    interrupt_at(config("stopped"), 3)
    killed = train(config("killed"))
    status = json.loads((killed / "run.json").read_text())
    (killed / "run.json").write_text(json.dumps({**status, "state": "running"}))  # as SIGKILL leaves it
    (killed / ".lock").write_text(json.dumps({"pid": 2**22 + 12345, "host": os.uname().nodename}))
    (root / "no_config").mkdir()
    (root / "no_config" / "metrics.jsonl").write_text("{}\n")
    garbled = root / "garbled"
    garbled.mkdir()
    (garbled / "config.yaml").write_text("model: [unclosed\n")
    damaged = train(config("damaged"))
    (damaged / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    return root


def test_srgan_runs_ranks_runs_and_says_what_is_broken(srgan, runs_folder):
    result = srgan("runs", runs_folder, "--json")
    assert result.returncode == 0, result
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"lr1e-2", "lr1e-3", "lr1e-4", "stopped", "killed", "garbled", "damaged"}
    finished = [r for r in json.loads(result.stdout) if r["name"].startswith("lr")]
    psnrs = [r["best_psnr"] for r in finished]
    assert psnrs == sorted(psnrs, reverse=True)  # best first
    lr = rows["lr1e-2"]
    assert lr["preset"] == "demo" and lr["changes"]["train.lr_g"] == 1e-2 and "train.run_dir" not in lr["changes"]
    assert "train.lr_g" not in rows["lr1e-3"]["changes"]  # the demo preset's own rate
    assert (lr["step"], lr["planned_steps"], lr["state"]) == (4, 4, "finished")
    assert lr["bicubic_psnr"] > 20 and 0 < lr["best_ssim"] < 1 and lr["wall_seconds"] > 0
    last_validation = (runs_folder / "lr1e-2" / "validation.csv").read_text().splitlines()[-1].split(",")
    assert lr["last_psnr"] == pytest.approx(float(last_validation[2]), abs=1e-4) and lr["last_psnr"] <= lr["best_psnr"]
    assert lr["last_ssim"] == pytest.approx(float(last_validation[3]), abs=1e-6)
    assert all(isinstance(lr[name], float) for name in ("d_loss", "g_loss", "d_score", "g_score"))
    assert (rows["stopped"]["state"], rows["stopped"]["step"]) == ("interrupted", 3)
    assert rows["killed"]["state"] == "killed"
    assert rows["garbled"]["state"] == "broken" and "config.yaml" in rows["garbled"]["problem"]
    assert rows["damaged"]["state"] == "broken" and "metrics.jsonl: line 2" in rows["damaged"]["problem"]
    table = srgan("runs", runs_folder)
    assert table.returncode == 0 and "Traceback" not in table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["run", "preset", "steps", "state"] and "lr_g=0.01" in table.stdout
    assert any(line.startswith(str(runs_folder / "damaged")) and "line 2" in line for line in lines)


def test_srgan_plot_overlays_runs_with_their_differences_as_legend(srgan, runs_folder, tmp_path):
    runs = [runs_folder / f"lr{lr}" for lr in ("1e-2", "1e-3", "1e-4")]
    assert run_labels(runs) == ["lr_g=0.01", "lr_g=0.001", "lr_g=0.0001"]
    out = tmp_path / "runs.png"
    result = srgan("plot", *runs, "-o", out)
    assert result.returncode == 0, result
    assert Image.open(out).size == (1280, 680)
    assert srgan("plot", *runs).returncode == 2  # several runs: -o is needed
    assert srgan("plot", *runs, "-o", out).returncode == 2  # exists
    single = tmp_path / "psnr.png"
    named = ["fast", "mid", "slow"]
    assert srgan("plot", *runs, "-o", single, "--psnr-only", *(f"--label={n}" for n in named)).returncode == 0
    assert srgan("plot", *runs, "-o", tmp_path / "x.png", "--label", "one").returncode == 2  # one name, 3 runs
    assert Image.open(single).size == (1040, 440)  # one panel and its legend, not six


def test_sweep_values_split_on_commas_outside_brackets():
    axes = parse_sweep(["train.betas=[0.5, 0.9],[0.9, 0.999]", "loss.weights.image=0,1"])
    assert axes == [("train.betas", ["[0.5, 0.9]", "[0.9, 0.999]"]), ("loss.weights.image", ["0", "1"])]
    names = [v.name for v in variants_of(axes)]
    assert names == [
        "betas=[0.5,0.9],image=0",
        "betas=[0.5,0.9],image=1",
        "betas=[0.9,0.999],image=0",
        "betas=[0.9,0.999],image=1",
    ]
    assert [v.name for v in variants_of(parse_sweep(["loss.image=mse,l1", "loss.weights.image=1,2"]))][
        0
    ] == "loss.image=mse,loss.weights.image=1"  # the last parts clash: whole keys


def test_a_sweep_runs_every_variant_and_resumes_after_an_interrupt(photo_dir, tmp_path):
    sweep = tmp_path / "sweep"
    args = [
        "train",
        *set_args(
            tiny_overrides(
                photo_dir, sweep, "train.max_steps=20", "train.epochs=100", "train.save_every=5", "data.repeat=20"
            )
        ),
        "--sweep",
        "train.lr_g=1e-3,1e-4",
        "--sweep",
        "gan.update=detach",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "srgan.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    second = sweep / "lr_g=1e-4,update=detach" / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and not (second.exists() and len(second.read_text().splitlines()) >= 2):
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert f"the sweep stops here: continue it with srgan train --resume {sweep}" in stderr
    first = sweep / "lr_g=1e-3,update=detach"
    first_bytes = (first / "checkpoints" / "last.pt").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "srgan.cli", "train", "--resume", str(sweep)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "lr_g=1e-3,update=detach is finished; skipping it" in done.stderr
    assert (first / "checkpoints" / "last.pt").read_bytes() == first_bytes  # untouched
    table = done.stdout.splitlines()
    assert len(table) == 2 + 2 and all("finished" in line and "20/20" in line for line in table[2:])
    steps = [json.loads(line)["step"] for line in second.read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 20  # resumed, no row twice


def test_sweep_values_keep_nested_mappings_whole():
    axes = parse_sweep(["train={lr_g: 1, lr_schedule: {gamma: 0.5}},{lr_g: 2}", "model.blocks=1"])
    assert axes == [("train", ["{lr_g: 1, lr_schedule: {gamma: 0.5}}", "{lr_g: 2}"]), ("model.blocks", ["1"])]


def test_values_cut_short_in_folder_names_still_give_distinct_names():
    long = "a" * 100
    names = [v.name for v in variants_of([("name", [long + "1", long + "2"])])]
    assert names[0] != names[1]  # the first 60 characters are the same: a hash of the whole tells them apart
    assert all(n.startswith("name=" + "a" * 60 + "-") and len(n) == len("name=") + 60 + 9 for n in names)
    assert names == [v.name for v in variants_of([("name", [long + "1", long + "2"])])]  # the same every time
