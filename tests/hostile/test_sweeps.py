"""Sweeps and section values: a sweep never lands in a run folder (nor a run
in a sweep folder), a whole section given as a value is merged key by key,
a sweep.yaml read back is checked as strictly as when it was written, and
variant folder names fit the file system whatever the values."""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from conftest import assert_refused, assert_unchanged, interrupt_at, run_cli, set_args, snapshot, tiny_overrides
from srgan.configs import load_config
from srgan.training import train
from srgan.training.state import load_checkpoint


@pytest.fixture(scope="module")
def section_sweep(photo_dir, tmp_path_factory):
    """A finished sweep of 2 tiny variants whose swept values are whole sections."""
    folder = tmp_path_factory.mktemp("sweeps") / "sections"
    result = run_cli(
        "train",
        *set_args(tiny_overrides(photo_dir, folder)),
        "--sweep",
        "train={lr_g: 1e-3},{lr_g: 2e-3, lr_schedule: {gamma: 0.5}}",
        "--sweep",
        "model={blocks: 2}",
    )
    assert result.returncode == 0, result
    return folder


@pytest.fixture
def plan(photo_dir, tmp_path) -> dict:
    """A sweep.yaml as `srgan train --sweep train.lr_g=1e-3,2e-3 --sweep model.blocks=2` writes it."""
    return {
        "config": "demo",
        "overrides": tiny_overrides(photo_dir, tmp_path / "elsewhere"),
        "sweep": [{"key": "train.lr_g", "values": ["1e-3", "2e-3"]}, {"key": "model.blocks", "values": ["2"]}],
        "variants": ["lr_g=1e-3,blocks=2", "lr_g=2e-3,blocks=2"],
    }


def run_config(run) -> dict:
    return yaml.safe_load((run / "config.yaml").read_text())


# ---- a sweep into a run folder, a run into a sweep folder -------------------------


def test_a_sweep_into_a_run_folder_is_refused_and_the_run_still_resumes(srgan, photo_dir, tmp_path):
    finished = train(load_config("demo", tiny_overrides(photo_dir, tmp_path / "finished")))
    stopped = interrupt_at(load_config("demo", tiny_overrides(photo_dir, tmp_path / "stopped")), 1)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    for folder, culprit in ((finished, "holds a run"), (stopped, "holds a run"), (other, "notes.txt")):
        before, entries = snapshot(folder), sorted(folder.iterdir())
        result = srgan("train", *set_args(tiny_overrides(photo_dir, folder)), "--sweep", "train.lr_g=1e-4,1e-3")
        assert_refused(result, culprit)
        assert str(folder) in result.stderr.splitlines()[-1]
        assert_unchanged(before)
        assert sorted(folder.iterdir()) == entries  # no sweep.yaml, no variant folder
    # and --resume still means the run, not a sweep
    result = srgan("train", "--resume", stopped)
    assert result.returncode == 0, result
    assert load_checkpoint(stopped)["step"] == 2
    result = srgan("train", "--resume", finished, "--set", "train.max_steps=3", "--set", "train.epochs=2")
    assert result.returncode == 0, result
    assert load_checkpoint(finished)["step"] == 3


def test_a_run_into_a_sweep_folder_is_refused(srgan, photo_dir, plan, tmp_path):
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "sweep.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    result = srgan("train", *set_args(tiny_overrides(photo_dir, folder)))
    assert_refused(result, "holds a sweep")
    assert f"--resume {folder}" in result.stderr.splitlines()[-1]
    assert [p.name for p in folder.iterdir()] == ["sweep.yaml"]


# ---- a whole section as a value ----------------------------------------------------


def test_a_section_value_is_merged_key_by_key(srgan):
    shown = srgan(
        "config",
        "show",
        "demo",
        "--set",
        "model={blocks: 1}",
        "--set",
        "train={lr_schedule: {gamma: 0.5}, max_steps: 9}",
    )
    assert shown.returncode == 0, shown
    config = yaml.safe_load(shown.stdout)
    demo = yaml.safe_load(srgan("config", "show", "demo").stdout)
    assert config["model"] == {**demo["model"], "blocks": 1}  # channels stays the demo's 32
    assert config["train"] == {
        **demo["train"],
        "max_steps": 9,
        "lr_schedule": {**demo["train"]["lr_schedule"], "gamma": 0.5},
    }
    assert {k: v for k, v in config.items() if k not in ("model", "train")} == {
        k: v for k, v in demo.items() if k not in ("model", "train")
    }


@pytest.mark.parametrize(
    "override, culprit",
    [
        ("model=3", "model: expected a mapping, got 3 (int); or set its keys one by one, e.g. --set model.arch="),
        ("train.lr_schedule=[1]", "train.lr_schedule: expected a mapping, got a list"),
        ("model=null", "model: expected a mapping, got null"),
        ("model={blokcs: 1}", "unknown key model.blokcs (did you mean 'blocks'?)"),
        ("train={lr_schedule: {gama: 0.5}}", "unknown key train.lr_schedule.gama (did you mean 'gamma'?)"),
        ("train={lr_schedule: 3}", "train.lr_schedule: expected a mapping, got 3 (int)"),
        ("train={epochs: many}", "train.epochs: expected an integer, got 'many'"),
    ],
)
def test_a_section_value_that_is_no_mapping_or_has_unknown_keys_is_refused(srgan, override, culprit):
    assert_refused(srgan("config", "show", "demo", "--set", override), culprit)


def test_a_swept_section_keeps_the_other_settings_of_the_section(section_sweep):
    plan = yaml.safe_load((section_sweep / "sweep.yaml").read_text())
    runs = [section_sweep / name for name in plan["variants"]]
    assert len(runs) == 2
    demo = load_config("demo")
    for run, lr_g, gamma in zip(runs, (1e-3, 2e-3), (demo.train.lr_schedule.gamma, 0.5), strict=True):
        config = run_config(run)
        assert json.loads((run / "run.json").read_text())["state"] == "finished"
        t = config["train"]
        assert (t["lr_g"], t["lr_schedule"]["gamma"]) == (lr_g, gamma)
        # the user's --set and the preset's values of the swept sections are all still there
        assert (t["max_steps"], t["precision"], t["device"], t["epochs"], t["lr_d"]) == (
            2,
            "fp32",
            "cpu",
            1,
            demo.train.lr_d,
        )
        assert t["lr_schedule"]["kind"] == demo.train.lr_schedule.kind and t["run_dir"] == str(run)
        assert (config["model"]["blocks"], config["model"]["channels"], config["model"]["d_channels"]) == (2, 8, 8)
        assert config["model"]["residual"] == demo.model.residual


# ---- a tampered sweep.yaml -----------------------------------------------------------


def edit(change):
    def apply(plan: dict) -> str:
        change(plan)
        return yaml.safe_dump(plan, sort_keys=False)

    return apply


def text(content):
    return lambda plan: content


TAMPERED = {
    "no values": (edit(lambda p: p["sweep"][0].update(values=[])), "sweep[0].values: expected at least one value"),
    "no sweep": (edit(lambda p: p.update(sweep=[])), "sweep: expected at least one key"),
    "a key twice": (edit(lambda p: p["sweep"].append(dict(p["sweep"][0]))), "sweep: train.lr_g given twice"),
    "a YAML key twice": (
        lambda p: "config: demo\n" + yaml.safe_dump(p, sort_keys=False),
        "line 2: key 'config' given twice",
    ),
    "no variants": (edit(lambda p: p.pop("variants")), "missing variants"),
    "an extra key": (edit(lambda p: p.update(extra=1)), "unknown key extra"),
    "an extra axis key": (edit(lambda p: p["sweep"][0].update(step=1)), "sweep[0]: unknown key step"),
    "an axis without values": (edit(lambda p: p["sweep"][0].pop("values")), "sweep[0]: missing values"),
    "a list": (text("- 1\n- 2\n"), "expected a mapping of config, overrides, sweep and variants, got a list"),
    "empty": (text(""), "expected a mapping of config, overrides, sweep and variants, got null"),
    "config a number": (edit(lambda p: p.update(config=3)), "config: expected a preset name or a YAML path, got 3"),
    "config unknown": (edit(lambda p: p.update(config="nope")), "no preset named 'nope'"),
    "overrides a string": (edit(lambda p: p.update(overrides="x=1")), "overrides: expected a list, got 'x=1'"),
    # overrides[N], N the appended one's place
    "an override a number": (edit(lambda p: p["overrides"].append(1)), "]: expected a string, got 1 (int)"),
    "an override wrong": (
        edit(lambda p: p["overrides"].append("train.epochs=many")),
        "train.epochs: expected an integer, got 'many'",
    ),
    "a value wrong": (
        edit(
            lambda p: p.update(
                sweep=[p["sweep"][0], {"key": "model.blocks", "values": ["999"]}],
                variants=["lr_g=1e-3,blocks=999", "lr_g=2e-3,blocks=999"],
            )
        ),
        "model.blocks: expected at most 128",
    ),
    "sweep a mapping": (edit(lambda p: p.update(sweep={"key": "x"})), "sweep: expected a list, got a mapping"),
    "an axis a number": (
        edit(lambda p: p["sweep"].__setitem__(0, 3)),
        "sweep[0]: expected a mapping of key and values, got 3",
    ),
    "a key a number": (edit(lambda p: p["sweep"][0].update(key=3)), "sweep[0].key: expected a string, got 3"),
    "values numbers": (edit(lambda p: p["sweep"][1].update(values=[2])), "sweep[1].values[0]: expected a string"),
    "values a string": (edit(lambda p: p["sweep"][1].update(values="2")), "sweep[1].values: expected a list"),
    "an empty value": (edit(lambda p: p["sweep"][1].update(values=[""])), "sweep[1].values[0]: expected a value"),
    "variants a string": (edit(lambda p: p.update(variants="a")), "variants: expected a list, got 'a'"),
    "a variant renamed": (
        edit(lambda p: p["variants"].__setitem__(0, "../escape")),
        "variants: expected the grid's folder names",
    ),
    "a variant missing": (edit(lambda p: p["variants"].pop()), "variants: expected the grid's folder names"),
    "a variant added": (edit(lambda p: p["variants"].append("more")), "variants: expected the grid's folder names"),
    "a huge grid": (
        edit(lambda p: p.update(sweep=[{"key": f"k{i}", "values": [str(v) for v in range(10)]} for i in range(9)])),
        "more than 1,000 variants; a sweep trains at most 1,000",
    ),
    "a huge file": (lambda p: yaml.safe_dump(p) + "#" * (2 << 20) + "\n", "bytes; a sweep plan is at most 1,048,576"),
    "not YAML": (text("config: [demo\n"), "line 2"),
}


@pytest.mark.parametrize("case", TAMPERED)
def test_a_tampered_sweep_plan_is_refused_and_nothing_trains(srgan, plan, tmp_path, case):
    change, culprit = TAMPERED[case]
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "sweep.yaml").write_text(change(plan), encoding="utf-8")
    result = srgan("train", "--resume", folder)
    assert_refused(result, culprit)
    assert f"{folder / 'sweep.yaml'}: " in result.stderr.splitlines()[-1]
    assert [p.name for p in folder.iterdir()] == ["sweep.yaml"]  # nothing trained


@pytest.mark.parametrize("kind", ["folder", "fifo", "device"])
def test_a_sweep_plan_that_is_no_regular_file_is_refused(srgan, tmp_path, kind):
    folder = tmp_path / "copy"
    folder.mkdir()
    plan = folder / "sweep.yaml"
    if kind == "folder":
        plan.mkdir()
    elif kind == "fifo":
        os.mkfifo(plan)  # reading it would wait forever for a writer
    else:
        plan.symlink_to("/dev/zero")  # endless
    assert_refused(srgan("train", "--resume", folder), f"{plan}: not a regular file")
    assert [p.name for p in folder.iterdir()] == ["sweep.yaml"]


def test_an_untouched_plan_resumes_and_skips_the_finished_variants(srgan, section_sweep):
    before = snapshot(section_sweep)
    result = srgan("train", "--resume", section_sweep)
    assert result.returncode == 0, result
    assert result.stderr.count("is finished; skipping it") == 2
    assert_unchanged(before)


# ---- variant folder names --------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Glyph")  # curves.png's title has no CJK font here
def test_long_values_give_short_unique_stable_folder_names(srgan, photo_dir, tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()  # an empty folder is a fine place for a sweep
    # a name's first 60 characters are 180 bytes of UTF-8: with the other
    # settings, the folder names would pass 255 bytes
    names = ["甲" + "长" * 64, "乙" + "长" * 64]  # 195 bytes: a name is at most 200
    result = srgan(
        "train",
        *set_args(tiny_overrides(photo_dir, folder)),
        "--sweep",
        "name=" + ",".join(names),
        "--sweep",
        "gan={d_loss: bce, update: retain_graph}",
        "--sweep",
        "loss.perceptual={network: vgg16, layer: relu1_2, weights: none}",
    )
    assert result.returncode == 0, result
    plan = yaml.safe_load((folder / "sweep.yaml").read_text())
    variants = plan["variants"]
    assert len(set(variants)) == 2
    for variant, name in zip(variants, names, strict=True):
        assert len(variant.encode()) <= 255 and variant.startswith(f"name={name[:60]},gan=_d_loss_"), variant
        assert re.search(r"-[0-9a-f]{8}$", variant), variant
        run = folder / variant
        assert json.loads((run / "run.json").read_text())["state"] == "finished"
        assert run_config(run)["name"] == name
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == sorted(variants)
    # the same names on --resume: both found finished
    again = srgan("train", "--resume", folder)
    assert again.returncode == 0, again
    assert again.stderr.count("is finished; skipping it") == 2
