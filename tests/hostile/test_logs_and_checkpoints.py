"""Logs and checkpoints as a crash, a full disk or a hostile user leaves
them: a torn last line is tolerated, other damage is refused by file and
line, and a malformed checkpoint is refused naming its first problem, on
every path that loads one."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch
from PIL import Image

from conftest import assert_refused, assert_unchanged, interrupt_at, skimage_photo, snapshot, tiny_overrides
from srgan.configs import load_config
from srgan.models import save_checkpoint
from srgan.training.state import load_checkpoint


@pytest.fixture
def run(tiny_run, tmp_path):
    """A private copy of the finished tiny run."""
    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy, ignore=shutil.ignore_patterns(".lock"))
    (copy / "config.yaml").write_text((copy / "config.yaml").read_text().replace(str(tiny_run), str(copy)))
    return copy


def resume(srgan, run, *extra):
    return srgan("train", "--resume", run, "--set", "train.max_steps=4", "--set", "train.epochs=10", *extra)


def test_a_torn_last_line_is_tolerated_by_resume_and_plot(srgan, run):
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 2, "step": 3, "g_lo')  # what a kill mid-append leaves
    with open(run / "validation.csv", "a") as f:
        f.write("2,3,27.1")
    result = srgan("plot", run)
    assert result.returncode == 0, result
    assert "cut short" in result.stderr
    result = resume(srgan, run)
    assert result.returncode == 0, result
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    with open(run / "validation.csv") as f:
        assert [row["step"] for row in csv.DictReader(f)] == ["2", "4"]


@pytest.mark.parametrize(
    "name, damage, culprit",
    [
        (
            "metrics.jsonl",
            lambda text: text.replace("\n", "\nnot json\n", 1),
            "metrics.jsonl: line 2 is not a metrics row",
        ),
        ("metrics.jsonl", lambda text: '{"step": "one"}\n' + text, "metrics.jsonl: line 1 is not a metrics row"),
        ("validation.csv", lambda text: text.replace("\n", "\n1,x,garbage,,,\n", 1), "validation.csv: line 2"),
        ("epochs.csv", lambda text: "epoch;step\n" + text, "epochs.csv: line 1: expected the columns"),
        ("epochs.csv", lambda text: text + "\xff\xfe\n", "epochs.csv"),
    ],
)
def test_damage_inside_a_log_is_refused_by_file_and_line(srgan, run, name, damage, culprit):
    path = run / name
    if name == "epochs.csv" and "\xff" in damage(""):
        path.write_bytes(path.read_bytes() + b"\xff\xfe\n")
    else:
        path.write_text(damage(path.read_text()))
    before = snapshot(run)
    assert_refused(resume(srgan, run), culprit)
    assert_unchanged({p: d for p, d in before.items() if p.name != ".lock"})
    if name != "epochs.csv":
        assert_refused(srgan("plot", run, "-o", run.parent / "c.png"), culprit)


def mutate(state, change):
    state = dict(state)
    change(state)
    return state


def set_path(keys, value):
    def change(state):
        node = state
        for key in keys[:-1]:
            node[key] = dict(node[key])
            node = node[key]
        node[keys[-1]] = value

    return change


def delete(key):
    return lambda state: state.pop(key)


def head_weight(value):
    return set_path(["generator", "head.0.weight"], value)


# (what is wrong, the change, the culprit named, whether generator-only loads are affected)
MALFORMED = [
    (
        "a generator weight of the wrong shape",
        head_weight(torch.zeros(3, 3)),
        "generator: head.0.weight has shape [3, 3]",
        True,
    ),
    ("NaN weights", head_weight(torch.full((8, 3, 9, 9), float("nan"))), "generator: head.0.weight holds NaN", True),
    (
        "a generator that is not a state dict",
        set_path(["generator"], torch.zeros(3)),
        "generator: expected a state dict",
        True,
    ),
    (
        "a missing generator weight",
        lambda s: s.__setitem__("generator", {k: v for k, v in s["generator"].items() if k != "tail.bias"}),
        "generator: lacks tail.bias",
        True,
    ),
    ("a config that is not a mapping", set_path(["config"], [1, 2]), "config: expected a mapping", True),
    (
        "huge networks claimed",
        set_path(["config", "model", "blocks"], 10**9),
        "model.blocks: expected at most 128",
        True,
    ),
    ("a float scale", set_path(["config", "model", "scale"], 4.0), "model.scale: expected one of 1, 2, 3, 4, 8", True),
    ("a missing optimizer", delete("optimizer_g"), "lacks optimizer_g", False),
    (
        "an optimizer of another network",
        lambda s: s.__setitem__("optimizer_d", s["optimizer_g"]),
        "optimizer_d: holds",
        False,
    ),
    ("a bad rng state", set_path(["rng", "python"], [3, [1, 2], None]), "rng: python", False),
    ("a bad torch rng state", set_path(["rng", "torch"], torch.zeros(5, dtype=torch.uint8)), "rng: torch", False),
    ("a step that is a string", set_path(["step"], "3"), "step: expected an integer", False),
    ("metric sums that are not numbers", set_path(["metrics", "sums"], {"g_loss": "x"}), "metrics:", False),
    (
        "discriminator weights of another size",
        lambda s: s.__setitem__("discriminator", {}),
        "discriminator: lacks",
        False,
    ),
]


@pytest.mark.parametrize("what, change, culprit, for_generator", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_checkpoint_is_refused_on_every_loading_path(
    srgan, run, photo_dir, tmp_path, what, change, culprit, for_generator
):
    last = run / "checkpoints" / "last.pt"
    save_checkpoint(last, mutate(torch.load(last, weights_only=True), change))
    before = snapshot(run)
    assert_refused(resume(srgan, run), culprit)
    image = tmp_path / "p.png"
    Image.fromarray(skimage_photo("coffee")[:48, :48]).save(image)
    upscaled = srgan("upscale", image, "-k", last, "-o", tmp_path / "out")
    evaluated = srgan("evaluate", photo_dir, "-k", last)
    from conftest import set_args

    initialised = srgan("train", *set_args(tiny_overrides(photo_dir, tmp_path / "new", f"model.init_from={last}")))
    if for_generator:
        for result in (upscaled, evaluated):
            assert_refused(result, culprit)
        assert_refused(initialised, culprit)
        assert_refused(initialised, "model.init_from:")
        assert not (tmp_path / "out").exists()
    else:  # what resuming alone needs does not stop the generator's users
        assert upscaled.returncode == 0 and evaluated.returncode == 0 and initialised.returncode == 0
    assert_unchanged({p: d for p, d in before.items() if p.name != ".lock"})


@pytest.mark.parametrize("stop_at", [2], ids=["epoch-end"])
def test_an_interrupt_on_an_epochs_last_step_loses_no_row(photo_dir, val_dir, tmp_path, stop_at):
    """Interrupted on an epoch's last step, resumed: the same rows and weights
    as a run never stopped (every other position, with 0 and 2 workers:
    tests/test_reproducibility.py)."""
    from srgan.training.loop import train

    def config(run_dir, *extra):
        return load_config(
            "demo",
            tiny_overrides(photo_dir, run_dir, f"data.val={val_dir}", "train.epochs=10", "train.max_steps=4", *extra),
        )

    whole = train(config(tmp_path / "whole"))
    part = interrupt_at(config(tmp_path / "part"), stop_at)
    train(config(part), resume=part)

    def rows(run, name):
        with open(run / name) as f:
            return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(f)]

    for name in ("epochs.csv", "validation.csv"):
        assert rows(part, name) == rows(whole, name), name
    a, b = load_checkpoint(whole), load_checkpoint(part)
    for key in ("generator", "discriminator"):
        for name, tensor in a[key].items():
            assert torch.equal(tensor, b[key][name]), (key, name)
