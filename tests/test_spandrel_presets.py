"""The presets of spandrel's architectures (configs/span_x4.yaml, ...): each
loads and resolves, its network has the published size, and its training
crop meets the network's size rule (the Trainer refuses one that does not)."""

from __future__ import annotations

import json

import pytest
import torch

from srgan.configs import load_config, preset_names
from srgan.models import build_generator, resolve_architecture
from srgan.models.spandrel_generator import check_crop

pytest.importorskip("spandrel")

# The parameters of each preset's network as srgan trains it, against the
# paper's count (SPAN's includes its training branches: 0.4 M once fused).
PARAMETERS = {
    "span_x4": (2_236_728, "span"),
    "realspan_x4": (2_236_728, "span"),
    "realplksr_x4": (7_389_680, "realplksr"),
    "omnisr_x4": (805_376, "omnisr"),
    "dat2_x4": (11_212_131, "dat"),  # DAT-2: 11.21 M
    "swinir_x4": (11_900_199, "swinir"),  # SwinIR-M x4: 11.9 M
    "hat_x4": (9_621_183, "hat"),  # HAT-S x4: 9.6 M
}
# The transformers' depth keys: their count is affine in the stages and the
# pairs of blocks a stage (DAT alternates two kinds of block), so three
# shallow builds give it without building 36 blocks.
DEPTH_KEYS = {
    "dat2_x4": ("depth", "num_heads"),
    "swinir_x4": ("depths", "num_heads"),
    "hat_x4": ("depths", "num_heads"),
}
# Depth changes no size rule (windows and splits do): these build the real
# network a block deep, so the size rule comes from spandrel's own reading.
SHALLOW = {
    "span_x4": {},
    "realspan_x4": {},
    "realplksr_x4": {"n_blocks": 1},
    "omnisr_x4": {"res_num": 1},
    "dat2_x4": {"depth": [1], "num_heads": [6]},
    "swinir_x4": {"depths": [1], "num_heads": [6]},
    "hat_x4": {"depths": [1], "num_heads": [6]},
}


def test_every_preset_of_spandrels_architectures_is_shipped():
    assert set(PARAMETERS) <= set(preset_names())


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_the_preset_resolves_and_its_network_has_the_published_size(name):
    expected, arch = PARAMETERS[name]
    config = resolve_architecture(load_config(name))
    assert config.model.arch == arch and config.model.scale == 4
    given = load_config(name).model.options
    assert all(config.model.options[key] == value for key, value in given.items())  # the preset's numbers kept
    if name not in DEPTH_KEYS:
        assert count(name, {}) == expected
        return
    depth, heads = DEPTH_KEYS[name]
    stages, pairs = len(given[depth]), given[depth][0] // 2
    assert given[depth] == [2 * pairs] * stages
    one = count(name, {depth: [2], heads: [6]})
    pair = count(name, {depth: [4], heads: [6]}) - one  # two blocks
    stage = count(name, {depth: [2, 2], heads: [6, 6]}) - one - pair  # a stage's own layers
    assert one - stage - pair + stages * (stage + pairs * pair) == expected


def count(name, options):
    """The parameters of the preset's network with `options` over its own, built on the meta device."""
    with torch.device("meta"):
        generator = build_generator(resolved(name, options).model)
    return sum(p.numel() for p in generator.parameters())


def resolved(name, options, *extra):
    given = load_config(name).model.options
    return resolve_architecture(load_config(name, [f"model.options={json.dumps({**given, **options})}", *extra]))


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_the_presets_training_crop_meets_the_networks_size_rule(name):
    config = resolve_architecture(load_config(name))
    shallow = resolved(name, SHALLOW[name])
    generator = build_generator(shallow.model)  # on the CPU: spandrel reads the weights back
    check_crop(config, generator)  # raises SrganError where the crop breaks the rule
    need = generator.descriptor.size_requirements
    assert (config.data.crop_size // 4) % need.multiple_of == 0


def test_config_show_prints_a_presets_resolved_options(srgan):
    result = srgan("config", "show", "hat_x4")
    assert result.returncode == 0, result.stderr
    assert "window_size: 16" in result.stdout and "drop_path_rate: 0.1" in result.stdout  # a default, resolved
