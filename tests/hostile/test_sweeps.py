"""Sweeps and section values: a whole section given as a value is merged
key by key."""
from __future__ import annotations

import pytest
import yaml

from conftest import assert_refused


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
