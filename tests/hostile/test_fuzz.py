"""A short fuzz pass: `--set` overrides, YAML documents, image bytes and
checkpoint contents that raise anything but SrganError (a traceback for the
user) fail. Derandomized, so CI is repeatable; SRGAN_FUZZ_EXAMPLES=5000
runs a longer pass by hand."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from conftest import skimage_photo
from srgan.configs import Config, config_to_dict, load_config
from srgan.data.images import try_load_rgb8
from srgan.files.errors import SrganError
from srgan.inference.imageio import read_picture
from srgan.models import Discriminator, Generator
from srgan.training.state import check_checkpoint

EXAMPLES = int(os.environ.get("SRGAN_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


def dotted_keys(d, prefix=""):
    for key, value in d.items():
        if isinstance(value, dict):
            yield from dotted_keys(value, f"{prefix}{key}.")
        yield prefix + key


KEYS = sorted(dotted_keys(config_to_dict(Config())))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20))
yaml_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def only_srgan_errors(call):
    try:
        call()
    except SrganError:
        pass


@FUZZ
@given(key=st.one_of(st.sampled_from(KEYS), st.text(max_size=20)), value=st.text(max_size=40))
def test_set_overrides(key, value):
    only_srgan_errors(lambda: load_config("demo", [f"{key}={value}"]))


@FUZZ
@given(key=st.sampled_from(KEYS), value=yaml_values)
def test_set_overrides_of_any_yaml_value(key, value):
    text = yaml.safe_dump(value, default_flow_style=True).strip().replace("\n", " ")
    only_srgan_errors(lambda: load_config("demo", [f"{key}={text}"]))


@FUZZ
@given(
    document=st.one_of(
        st.text(max_size=200),
        yaml_values.map(yaml.safe_dump),
        st.dictionaries(
            st.sampled_from(["model", "data", "train", "loss", "gan", "name"]), yaml_values, max_size=4
        ).map(yaml.safe_dump),
    )
)
def test_yaml_documents(document):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_bytes(document.encode("utf-8", errors="replace"))
        only_srgan_errors(lambda: load_config(str(path)))


def encoded(fmt: str, **options) -> bytes:
    out = io.BytesIO()
    Image.fromarray(skimage_photo("coffee")[:40, :48]).save(out, format=fmt, **options)
    return out.getvalue()


SEEDS = {
    "png": encoded("PNG"),
    "jpg": encoded("JPEG", quality=90),
    "webp": encoded("WEBP"),
    "tif": encoded("TIFF"),
    "bmp": encoded("BMP"),
}


@FUZZ
@given(
    kind=st.sampled_from(sorted(SEEDS)),
    cut=st.integers(0, 4000),
    flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=6),
)
def test_image_bytes(kind, cut, flips):
    data = bytearray(SEEDS[kind])
    for position, value in flips:
        data[position % len(data)] = value
    data = bytes(data[: max(8, len(data) - cut)])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"fuzz.{kind}"
        path.write_bytes(data)
        only_srgan_errors(lambda: read_picture(path))  # the upscale path
        image = try_load_rgb8(path)  # the training path: None (skipped with a warning) or pixels
        assert image is None or (image.ndim == 3 and image.dtype == np.uint8)


def a_checkpoint() -> dict:
    torch.manual_seed(0)
    g, d = Generator(4, 1, 8), Discriminator(8)
    og, od = torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())
    from srgan.training.rng import rng_state

    return {
        "generator": g.state_dict(),
        "discriminator": d.state_dict(),
        "optimizer_g": og.state_dict(),
        "optimizer_d": od.state_dict(),
        "epoch": 1,
        "step": 0,
        "rng": rng_state(),
        "metrics": {},
        "config": config_to_dict(load_config("demo", ["model.blocks=1", "model.channels=8", "model.d_channels=8"])),
    }


CHECKPOINT = a_checkpoint()
junk = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=5), scalars, max_size=3),
    st.builds(lambda n: torch.zeros(n), st.integers(0, 5)),
)


@FUZZ
@given(
    path=st.lists(
        st.sampled_from(
            [
                "generator",
                "discriminator",
                "optimizer_g",
                "state",
                "param_groups",
                0,
                "rng",
                "python",
                "numpy",
                "torch",
                "config",
                "model",
                "train",
                "metrics",
                "sums",
                "step",
                "epoch",
                "head.0.weight",
                "exp_avg",
                "scale",
                "blocks",
            ]
        ),
        min_size=1,
        max_size=4,
    ),
    value=junk,
)
def test_checkpoint_contents(path, value):
    state = _replace(CHECKPOINT, path, value)
    only_srgan_errors(lambda: check_checkpoint(state, "fuzz.pt"))


def _replace(node, path, value):
    """A copy of `node` with the value at `path` (as far as it exists) replaced."""
    if not path:
        return value
    key = path[0]
    if isinstance(node, dict):
        copy = dict(node)
        copy[key] = _replace(node[key], path[1:], value) if key in node else value
        return copy
    if isinstance(node, list) and isinstance(key, int) and key < len(node):
        copy = list(node)
        copy[key] = _replace(node[key], path[1:], value)
        return copy
    return value


@pytest.mark.parametrize("kind", sorted(SEEDS))
def test_the_seed_images_themselves_decode(kind, tmp_path):
    path = tmp_path / f"seed.{kind}"
    path.write_bytes(SEEDS[kind])
    assert read_picture(path).color.shape[:2] == (40, 48)
