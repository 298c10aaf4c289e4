"""Config values and files a user (or a fuzzer) can give: each mistake is
one line naming the key or file and what was expected, before any work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import assert_refused

DEEP = "[" * 3000 + "]" * 3000


@pytest.mark.parametrize(
    "override, culprit",
    [
        ("model.scale=4.0", "model.scale: expected one of 1, 2, 3, 4, 8, got 4.0 (float)"),
        ("model.scale=true", "model.scale: expected one of 1, 2, 3, 4, 8, got True"),
        ("train.lr_g=inf", "train.lr_g: expected a finite number"),
        ("train.lr_g=.nan", "train.lr_g: expected a finite number"),
        ("train.lr_d=1e400", "train.lr_d: expected a finite number"),
        ("train.lr_schedule.gamma=-.inf", "train.lr_schedule.gamma: expected a finite number"),
        ("train.betas=[0.9, .nan]", "train.betas[1]: expected a finite number"),
        ("train.epochs=1.5", "train.epochs: expected an integer"),
        ("train.seed=-1", "train.seed: expected 0 to 4294967295"),
        ("train.seed=99999999999999999999999", "train.seed: expected 0 to"),
        ("model.blocks=100000", "model.blocks: expected at most 128"),
        ("model.channels=4096", "model.channels: expected at most 512"),
        ("data.batch_size=10000000", "data.batch_size: expected at most"),
        ("data.repeat=10000000000", "data.repeat: expected at most"),
        ("data.crop_size=1000000", "data.crop_size: expected at most"),
        ("data.val_max_size=10", "data.val_max_size: expected 0 or at least 19 px"),
        (f"train.epochs={DEEP}", "--set train.epochs: nested too deeply"),
        ("data.train=a\x00b", "data.train: expected a string without NUL"),
        ("name=..", "name: expected a non-empty name"),
        ("name=a\\b", "name: expected a non-empty name"),
        ("name=" + "a" * 201, "name: expected at most 200 bytes"),
        ("train=[1, 2]", "train: expected a mapping, got a list"),
        ("train.device=tpu", "train.device: expected auto, cpu, cuda or cuda:K"),
        ("loss.perceptual.layer=pool5", "data.crop_size: expected at least 32 px"),
        ("train..epochs=3", "unknown key train."),
        ("=3", "expected key.path=value"),
    ],
)
def test_bad_values_are_one_line_naming_the_key(srgan, override, culprit):
    extra = ["--set", "data.crop_size=16", "--set", "loss.weights.perceptual=0.1"] if "pool5" in override else []
    assert_refused(srgan("config", "show", "demo", *extra, "--set", override), culprit)


@pytest.mark.parametrize(
    "content, culprit",
    [
        (b"model: [1, 2\n", "line 2: expected ',' or ']'"),
        (b"\xff\xfe\x00garbage", "cannot be read"),
        (b"- a\n- b\n", "expected a mapping of config sections, got list"),
        (b"model: &a\n  scale: *a\n", "model.scale: expected one of 1, 2, 3, 4, 8, got a mapping"),
        (b"x: " + DEEP.encode(), "nested too deeply"),
        (b"a: " + b"b" * (2 << 20), "a config is at most"),
        (b"!!python/object/apply:os.system ['touch /tmp/srgan-yaml-pwned']\n", "line 1"),
    ],
)
def test_bad_config_files_are_one_line_naming_the_file(srgan, tmp_path, content, culprit):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    result = srgan("config", "show", path)
    assert_refused(result, culprit)
    assert "bad.yaml" in result.stderr.strip().splitlines()[-1]
    assert not Path("/tmp/srgan-yaml-pwned").exists()


def test_a_folder_given_as_config(srgan, tmp_path):
    assert_refused(srgan("config", "show", f"{tmp_path}/"), "no such file")


def test_a_fifo_or_device_given_as_config_is_named_for_what_it_is(srgan, tmp_path):
    fifo, device = tmp_path / "fifo.yaml", tmp_path / "zero.yaml"
    os.mkfifo(fifo)  # reading it would wait forever for a writer
    device.symlink_to("/dev/zero")  # endless
    assert_refused(srgan("config", "show", str(fifo)), "fifo.yaml: not a regular file (a FIFO)")
    assert_refused(srgan("config", "show", str(device)), "zero.yaml: not a regular file (a character device)")
