"""model.arch naming one of spandrel's SR architectures (models/spandrel_archs.py):
the options checked against its constructor, the network spandrel's own class
(so that spandrel reads srgan's files back as that architecture, with the same
output), and the run, its resume and the commands on tiny instances of SPAN,
RealPLKSR, DAT and SwinIR."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from conftest import pin_micro_batch, skimage_photo, tiny_overrides
from srgan.configs import config_to_dict, load_config
from srgan.files.errors import SrganError
from srgan.models import build_generator, resolve_architecture
from srgan.models.checkpoint import load_generator
from srgan.models.spandrel_generator import SpandrelGenerator
from srgan.training import train
from srgan.training.state import load_checkpoint

spandrel = pytest.importorskip("spandrel")
from spandrel.architectures.DAT import DAT  # noqa: E402
from spandrel.architectures.PLKSR import RealPLKSR  # noqa: E402
from spandrel.architectures.SPAN import SPAN  # noqa: E402
from spandrel.architectures.SwinIR import SwinIR  # noqa: E402

# Tiny instances: a run of a few steps takes seconds.
TINY = {
    "span": ["model.options={feature_channels: 8}"],
    "realplksr": ["model.options={dim: 8, n_blocks: 1, kernel_size: 15}"],  # 15: its weight gradient is large_kernel's
    "dat": [
        "model.options={embed_dim: 32, depth: [1], num_heads: [2], split_size: [2, 4], expansion_factor: 1.0, "
        "img_size: 8, drop_path_rate: 0.0}"
    ],
    "swinir": [
        "model.options={embed_dim: 8, depths: [1], num_heads: [2], window_size: 4, mlp_ratio: 1.0, img_size: 8, "
        "drop_path_rate: 0.0}"
    ],
}
CLASSES = {"span": SPAN, "realplksr": RealPLKSR, "dat": DAT, "swinir": SwinIR}
SRGAN_ONLY = ("model.blocks=", "model.channels=")  # keys of srgan's own architectures


CROP = {"dat": 64, "swinir": 64}  # their LR input: at least 16 px (spandrel's size requirement)


def spandrel_overrides(arch, photo_dir, run_dir, *extra):
    kept = [v for v in tiny_overrides(photo_dir, run_dir) if not v.startswith((*SRGAN_ONLY, "train.micro_batch="))]
    return pin_micro_batch([*kept, f"model.arch={arch}", *TINY[arch], f"data.crop_size={CROP.get(arch, 32)}", *extra])


def tiny_model(arch, *extra):
    return load_config("demo", [f"model.arch={arch}", *TINY[arch], "data.crop_size=32", *extra]).model


# ---- the options -----------------------------------------------------------------


def test_the_options_are_completed_with_the_constructors_defaults():
    config = resolve_architecture(load_config("demo", ["model.arch=span", "model.options={feature_channels: 8}"]))
    options = config.model.options
    assert options["feature_channels"] == 8 and options["img_range"] == 255.0 and options["norm"] is True
    assert options["rgb_mean"] == [0.4488, 0.4371, 0.404]  # a tuple default, as YAML writes it
    assert "upscale" not in options and "num_in_ch" not in options  # srgan sets the scale and the channels
    written = config_to_dict(config)["model"]
    assert written["options"] == options and "blocks" not in written and "channels" not in written


def test_srgan_sets_swinirs_upsampler_to_its_classical_sr_one():
    options = resolve_architecture(load_config("demo", ["model.arch=swinir"])).model.options
    assert options["upsampler"] == "pixelshuffle" and options["window_size"] == 8


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.options={embed: 8}"], r"model\.options\.embed: not an option of SPAN; its options: feature_channels"),
        (["model.options={upscale: 2}"], r"model\.options\.upscale: not an option of SPAN \(srgan sets it\)"),
        (["model.options={feature_channels: eight}"], r"model\.options\.feature_channels: expected an integer"),
        (["model.options={norm: 1}"], r"model\.options\.norm: expected true or false, got 1"),
    ],
)
def test_a_wrong_option_is_refused_with_its_key_path(overrides, message):
    with pytest.raises(SrganError, match=message):
        resolve_architecture(load_config("demo", ["model.arch=span", *overrides]))


def test_a_scale_the_network_does_not_build_is_refused():
    with pytest.raises(SrganError, match=r"model\.scale: expected 2, 3, 4 with model\.arch craft, got 8"):
        resolve_architecture(load_config("demo", ["model.arch=craft", "model.scale=8"]))


def test_a_literal_option_names_its_choices():
    config = load_config("demo", ["model.arch=plksr", "model.options={ccm_type: XYZ}"])
    with pytest.raises(SrganError, match=r"model\.options\.ccm_type: expected one of 'CCM', 'ICCM', 'DCCM'"):
        resolve_architecture(config)


@pytest.mark.parametrize(
    "arch, message",
    [
        ("swinlr", r"model\.arch: expected one of srresnet, rrdb, compact, atd, .*swinir \(srgan config archs\)"),
        ("SPAN", r"model\.arch: expected 'span' \(lower case\)"),
        ("gfpgan", r"model\.arch: spandrel's gfpgan is not a single-image SR network"),
    ],
)
def test_an_architecture_srgan_does_not_train_is_refused_naming_those_it_does(arch, message):
    with pytest.raises(SrganError, match=message):
        build_generator(load_config("demo", [f"model.arch={arch}"]).model)


def test_keys_of_the_other_family_are_refused(srgan):
    result = srgan("config", "show", "--set", "model.arch=span", "--set", "model.blocks=4")
    assert (
        result.returncode == 2 and "model.blocks: applies to model.arch srresnet and rrdb and compact" in result.stderr
    )
    result = srgan("config", "show", "--set", "model.options={dim: 4}")
    assert result.returncode == 2 and "model.options: applies to model.arch spandrel's" in result.stderr


def test_config_show_prints_the_resolved_options_and_archs_lists_them(srgan):
    result = srgan("config", "show", "--set", "model.arch=realplksr", "--set", "model.options.dim=16")
    assert result.returncode == 0, result.stderr
    options = yaml.safe_load(result.stdout)["model"]["options"]
    assert options["dim"] == 16 and options["n_blocks"] == 28 and options["kernel_size"] == 17
    result = srgan("config", "archs")
    assert result.returncode == 0 and "realplksr  spandrel's RealPLKSR: model.options dim, n_blocks" in result.stdout


def test_a_crop_below_the_networks_size_rule_is_refused_before_the_run_folder(photo_dir, tmp_path):
    config = load_config("demo", [*spandrel_overrides("dat", photo_dir, tmp_path / "run"), "data.crop_size=32"])
    with pytest.raises(
        SrganError,
        match=r"data\.crop_size: dat trains on LR sides at least 16 .* 32 / 4 = 8\); the nearest crop that fits: 64",
    ):
        train(config)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "arch, option, message",
    [
        ("span", "feature_channels=100000", r"model\.options: SPAN would hold more than srgan's limit of 610,000,000"),
        ("span", "feature_channels=-3", r"model\.options: SPAN refuses them \(RuntimeError: .*negative dimension"),
        ("span", "feature_channels=0", r"model\.options: SPAN's conv_1\.sk would have no features with them"),
        ("realplksr", "kernel_size=4", r"model\.options: RealPLKSR cannot run with them \(RuntimeError: The expand"),
    ],
)
def test_options_the_network_cannot_be_built_or_run_with_are_refused_before_any_memory_is_spent(arch, option, message):
    """100000 channels: 9.6e12 numbers, counted on the meta device; allocating them would fail or swap."""
    with pytest.raises(SrganError, match=message):
        build_generator(tiny_model(arch, f"model.options.{option}"))


def test_options_that_leave_a_layer_without_features_are_refused_naming_it():
    """DAT at 16 dims: its position bias has 0 features (torch runs it, onnxruntime does not)."""
    with pytest.raises(SrganError, match=r"DAT's layers\.0\.blocks\.0\.attn\.attns\.0\.pos\.pos_proj would have no"):
        build_generator(tiny_model("dat", "model.options.embed_dim=16"))


@pytest.mark.parametrize("arch, option", [("span", "img_range=1.0"), ("realplksr", "norm_groups=2")])
def test_an_option_spandrel_cannot_read_back_is_refused(arch, option):
    """Neither changes a weight's shape: spandrel would load the file with its defaults and upscale differently."""
    with pytest.raises(SrganError, match=r"spandrel cannot tell some of them from the weights"):
        build_generator(tiny_model(arch, f"model.options.{option}"))


# ---- the networks ----------------------------------------------------------------


@pytest.mark.parametrize("arch", list(TINY))
def test_the_network_is_spandrels_class_and_spandrel_reads_it_back_the_same(arch, tmp_path):
    g = build_generator(tiny_model(arch))
    assert isinstance(g, SpandrelGenerator) and type(g.network) is CLASSES[arch] and g.scale == 4
    # training runs the network's training form, with gradients, on a crop
    out = g.train()(torch.rand(2, 3, 8, 8))
    out.mean().backward()
    assert out.shape == (2, 3, 32, 32) and all(p.grad is not None for p in g.parameters() if p.requires_grad)
    # the community's loader reads the weights as that architecture, with the same output at any size
    read = spandrel.ModelLoader().load_from_state_dict(dict(g.network.state_dict()))
    assert type(read.model) is CLASSES[arch] and read.scale == 4
    x = torch.rand(1, 3, 13, 11)
    with torch.no_grad():
        assert torch.equal(g.eval()(x), read(x))


# ---- a run of each -----------------------------------------------------------------


@pytest.fixture(scope="module", params=list(TINY))
def spandrel_run(request, photo_dir, val_dir, tmp_path_factory):
    """4 steps: 2 generator-only, then GAN steps with EMA, validated."""
    arch = request.param
    folder = tmp_path_factory.mktemp(arch) / "whole"
    extra = (f"data.val={val_dir}", "train.epochs=10", "train.pretrain_steps=2", "train.ema_decay=0.5")
    config = load_config("demo", spandrel_overrides(arch, photo_dir, folder, "train.max_steps=4", *extra))
    return arch, train(config), extra


def test_the_run_resumes_to_the_bit(spandrel_run, photo_dir, tmp_path):
    from test_reproducibility import assert_same_checkpoints

    arch, whole, extra = spandrel_run
    state = load_checkpoint(whole)
    assert state["config"]["model"]["arch"] == arch and state["generator_ema"] is not None
    assert (
        yaml.safe_load((whole / "config.yaml").read_text())["model"]["options"] == state["config"]["model"]["options"]
    )
    part = tmp_path / "part"
    train(load_config("demo", spandrel_overrides(arch, photo_dir, part, "train.max_steps=3", *extra)))
    train(load_config(str(part / "config.yaml"), ["train.max_steps=4"]), resume=part)
    assert_same_checkpoints(whole, part)


def test_upscale_evaluate_and_export_read_back_by_spandrel(spandrel_run, srgan, val_dir, tmp_path):
    arch, whole, _ = spandrel_run
    generator = load_generator(whole)
    assert type(generator.network) is CLASSES[arch]
    photo = tmp_path / "photo.png"
    Image.fromarray(skimage_photo("chelsea")[:45, :61]).save(photo)
    cpu = ("--device", "cpu", "--precision", "fp32")
    result = srgan("upscale", photo, "-k", whole, "-o", tmp_path / "up.png", *cpu)
    assert result.returncode == 0, result.stderr
    assert np.asarray(Image.open(tmp_path / "up.png")).shape == (180, 244, 3)
    result = srgan("evaluate", val_dir, "-k", whole, "--json", tmp_path / "scores.json", *cpu)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "scores.json").read_text())["images"][0]["sr"]["psnr"] > 0
    result = srgan("export", whole, "-o", tmp_path / "g.safetensors")
    assert result.returncode == 0, result.stderr
    read = spandrel.ModelLoader().load_from_file(tmp_path / "g.safetensors")
    x = torch.rand(1, 3, 12, 9)
    with torch.no_grad():
        assert type(read.model) is CLASSES[arch] and torch.equal(read(x), generator.eval()(x))


def test_a_micro_batch_of_one_is_refused_for_dat_whose_batchnorm_needs_two(photo_dir, tmp_path):
    """DAT's channel attention normalises 1x1 pooled features over the batch: one sample would raise in torch."""
    overrides = spandrel_overrides("dat", photo_dir, tmp_path / "run", "data.batch_size=2", "train.accumulate=2")
    with pytest.raises(SrganError, match=r"data\.batch_size: dat trains on micro-batches of at least 2 .* = 1\)"):
        train(load_config("demo", overrides))
    assert not (tmp_path / "run").exists()
