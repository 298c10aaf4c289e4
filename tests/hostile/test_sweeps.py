"""Sweeps and section values: a sweep never lands in a run folder (nor a run
in a sweep folder), and a whole section given as a value is merged key by
key, in `--set` and in `--sweep`."""
from __future__ import annotations

import json

import pytest
import yaml

from conftest import assert_refused, assert_unchanged, interrupt_at, run_cli, set_args, snapshot, tiny_overrides
from srgan.configs import load_config
from srgan.models import load_checkpoint
from srgan.training import train


@pytest.fixture(scope="module")
def section_sweep(photo_dir, tmp_path_factory):
    """A finished sweep of 2 tiny variants whose swept values are whole sections."""
    folder = tmp_path_factory.mktemp("sweeps") / "sections"
    result = run_cli("train", *set_args(tiny_overrides(photo_dir, folder)),
                     "--sweep", "train={lr_g: 1e-3},{lr_g: 2e-3, lr_schedule: {gamma: 0.5}}",
                     "--sweep", "model={blocks: 2}")
    assert result.returncode == 0, result
    return folder


@pytest.fixture
def plan(photo_dir, tmp_path) -> dict:
    """A sweep.yaml as `srgan train --sweep train.lr_g=1e-3,2e-3 --sweep model.blocks=2` writes it."""
    return {"config": "demo", "overrides": tiny_overrides(photo_dir, tmp_path / "elsewhere"),
            "sweep": [{"key": "train.lr_g", "values": ["1e-3", "2e-3"]}, {"key": "model.blocks", "values": ["2"]}],
            "variants": ["lr_g=1e-3,blocks=2", "lr_g=2e-3,blocks=2"]}


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
    shown = srgan("config", "show", "demo", "--set", "model={blocks: 1}", "--set",
                  "train={lr_schedule: {gamma: 0.5}, max_steps: 9}")
    assert shown.returncode == 0, shown
    config = yaml.safe_load(shown.stdout)
    demo = yaml.safe_load(srgan("config", "show", "demo").stdout)
    assert config["model"] == {**demo["model"], "blocks": 1}  # channels stays the demo's 32
    assert config["train"] == {**demo["train"], "max_steps": 9,
                               "lr_schedule": {**demo["train"]["lr_schedule"], "gamma": 0.5}}
    assert {k: v for k, v in config.items() if k not in ("model", "train")} == \
        {k: v for k, v in demo.items() if k not in ("model", "train")}


@pytest.mark.parametrize("override, culprit", [
    ("model=3", "model: expected a mapping, got 3 (int); or set its keys one by one, e.g. --set model.scale="),
    ("train.lr_schedule=[1]", "train.lr_schedule: expected a mapping, got a list"),
    ("model=null", "model: expected a mapping, got null"),
    ("model={blokcs: 1}", "unknown key model.blokcs (did you mean 'blocks'?)"),
    ("train={lr_schedule: {gama: 0.5}}", "unknown key train.lr_schedule.gama (did you mean 'gamma'?)"),
    ("train={lr_schedule: 3}", "train.lr_schedule: expected a mapping, got 3 (int)"),
    ("train={epochs: many}", "train.epochs: expected an integer, got 'many'"),
])
def test_a_section_value_that_is_no_mapping_or_has_unknown_keys_is_refused(srgan, override, culprit):
    assert_refused(srgan("config", "show", "demo", "--set", override), culprit)


def test_a_swept_section_keeps_the_other_settings_of_the_section(section_sweep):
    plan = yaml.safe_load((section_sweep / "sweep.yaml").read_text())
    runs = [section_sweep / name for name in plan["variants"]]
    assert len(runs) == 2
    demo = load_config("demo")
    for run, lr_g, gamma in zip(runs, (1e-3, 2e-3), (demo.train.lr_schedule.gamma, 0.5)):
        config = run_config(run)
        assert json.loads((run / "run.json").read_text())["state"] == "finished"
        t = config["train"]
        assert (t["lr_g"], t["lr_schedule"]["gamma"]) == (lr_g, gamma)
        # the user's --set and the preset's values of the swept sections are all still there
        assert (t["max_steps"], t["precision"], t["device"], t["epochs"], t["lr_d"]) == (2, "fp32", "cpu", 1,
                                                                                      demo.train.lr_d)
        assert t["lr_schedule"]["kind"] == demo.train.lr_schedule.kind and t["run_dir"] == str(run)
        assert (config["model"]["blocks"], config["model"]["channels"], config["model"]["d_channels"]) == (2, 8, 8)
        assert config["model"]["residual"] == demo.model.residual
