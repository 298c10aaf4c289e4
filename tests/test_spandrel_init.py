"""model.init_from naming a community file of one of spandrel's architectures
srgan trains (SPAN, RealPLKSR, DAT, SwinIR here, as published: a bare state dict, BasicSR's
params_ema, a .safetensors): the arch, scale and options come from spandrel's
reading of the file, the config's own options must agree with it, and the
run starts from exactly its weights. A GAN stage starts from a pretrain run
of such an architecture. Every other architecture srgan trains reads a
community file of it too (OTHERS)."""

from __future__ import annotations

import pytest
import torch
import yaml

from conftest import assert_refused, set_args, tiny_overrides
from srgan.configs import load_config
from srgan.files.errors import SrganError
from srgan.training.state import load_checkpoint
from test_community_weights import esrgan_sequential, save
from test_spandrel_archs import CROP, SRGAN_ONLY

spandrel = pytest.importorskip("spandrel")
from spandrel.architectures.DAT import DAT  # noqa: E402
from spandrel.architectures.PLKSR import RealPLKSR  # noqa: E402
from spandrel.architectures.SPAN import SPAN  # noqa: E402
from spandrel.architectures.SwinIR import SwinIR  # noqa: E402


def span_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return SPAN(num_in_ch=3, num_out_ch=3, feature_channels=8, upscale=4).state_dict()


def swinir_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(2)
    network = SwinIR(
        in_chans=3, embed_dim=8, depths=[1], num_heads=[2], window_size=4, mlp_ratio=1.0, upscale=4,
        upsampler="pixelshuffle",
    )  # fmt: skip
    return network.state_dict()


def realplksr_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    return RealPLKSR(dim=8, n_blocks=1, kernel_size=5, upscaling_factor=4).state_dict()


def dat_weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(4)
    network = DAT(embed_dim=32, depth=[1], num_heads=[2], split_size=[2, 4], expansion_factor=1.0, upscale=4)
    return network.state_dict()


# arch -> its weights, the layout they are published in, and options spandrel reads from them
FILES = {
    "span": (span_weights, "top", {"feature_channels": 8, "bias": True}),
    "span-basicsr": (span_weights, "params_ema", {"feature_channels": 8}),
    "swinir": (swinir_weights, "safetensors", {"embed_dim": 8, "depths": [1], "num_heads": [2], "window_size": 4}),
    # spandrel names RealPLKSR's files PLKSR: srgan tells them apart by the class it builds
    "realplksr": (realplksr_weights, "top", {"dim": 8, "n_blocks": 1, "kernel_size": 5}),
    "dat": (dat_weights, "params_ema", {"embed_dim": 32, "depth": [1], "num_heads": [2], "split_size": [2, 4]}),
}


def community_file(case, tmp_path):
    make, layout, options = FILES[case]
    weights = make()
    return save(weights, tmp_path / f"{case}.pth", layout), weights, options


def overrides(arch, photo_dir, run_dir, *extra):
    """A tiny run of `arch` whose network's shape is left to model.init_from."""
    kept = [value for value in tiny_overrides(photo_dir, run_dir) if not value.startswith(SRGAN_ONLY)]
    return [*kept, f"model.arch={arch}", f"data.crop_size={CROP.get(arch, 32)}", *extra]


@pytest.mark.parametrize("case", FILES)
def test_config_show_prints_the_files_architecture_and_options(case, srgan, tmp_path):
    path, _, options = community_file(case, tmp_path)
    arch = case.split("-")[0]
    shown = srgan("config", "show", "--set", f"model.arch={arch}", "--set", f"model.init_from={path}")
    assert shown.returncode == 0, shown
    model = yaml.safe_load(shown.stdout)["model"]
    assert (model["arch"], model["scale"]) == (arch, 4)
    assert {key: model["options"][key] for key in options} == options
    assert "blocks" not in model and "channels" not in model


# swinir: the config gives options the weights do not fix (spandrel assumes img_size 64 and
# drop_path_rate 0.1): the config's values stand
@pytest.mark.parametrize(
    "case, given",
    [
        ("span-basicsr", {}),
        ("swinir", {"img_size": 8, "drop_path_rate": 0.0}),
        ("realplksr", {}),
        ("dat", {"img_size": 8, "drop_path_rate": 0.0}),
    ],
)
def test_a_run_starts_from_exactly_the_files_weights(case, given, photo_dir, tmp_path):
    from srgan.training.loop import Trainer

    path, weights, options = community_file(case, tmp_path)
    arch = case.split("-")[0]
    extra = [f"model.options.{key}={value}" for key, value in given.items()]
    trainer = Trainer(
        load_config("demo", overrides(arch, photo_dir, tmp_path / "run", f"model.init_from={path}", *extra))
    )
    try:
        assert trainer.config.model.arch == arch
        assert {key: trainer.config.model.options[key] for key in options | given} == options | given
        state = trainer.parts.generator.state_dict()
        assert state.keys() == {f"network.{key}" for key in weights}
        assert all(torch.equal(state[f"network.{key}"], tensor) for key, tensor in weights.items())
        ema = trainer.ema.model.state_dict() if trainer.ema is not None else state
        assert all(torch.equal(ema[f"network.{key}"], tensor) for key, tensor in weights.items())
    finally:
        trainer.close()
    written = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["model"]
    assert written["arch"] == arch and all(written["options"][key] == value for key, value in options.items())


def test_srgan_train_fine_tunes_a_span_file_and_a_gan_stage_starts_from_that_run(srgan, photo_dir, tmp_path):
    path, weights, _ = community_file("span", tmp_path)
    pre = overrides("span", photo_dir, tmp_path / "pre", f"model.init_from={path}", "train.max_steps=1")
    first = srgan("train", *set_args(pre))
    assert first.returncode == 0, first.stderr
    pretrained = load_checkpoint(tmp_path / "pre")
    assert pretrained["step"] == 1 and pretrained["config"]["model"]["options"]["feature_channels"] == 8
    assert not all(torch.equal(pretrained["generator"][f"network.{k}"], v) for k, v in weights.items())  # it trained

    from srgan.training.loop import Trainer

    stage = overrides("span", photo_dir, tmp_path / "gan", f"model.init_from={tmp_path / 'pre'}")
    trainer = Trainer(load_config("demo", [*stage, f"gan.init_from={tmp_path / 'pre'}"]))
    try:
        assert trainer.config.model.options == pretrained["config"]["model"]["options"]
        generator = pretrained.get("generator_ema") or pretrained["generator"]
        for expected, module in (
            (generator, trainer.parts.generator),
            (pretrained["discriminator"], trainer.parts.discriminator),
        ):
            state = module.state_dict()
            assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in expected)
    finally:
        trainer.close()
    from srgan.training.init_from import read_init_files

    asked = load_config("demo", [*stage, "model.options={feature_channels: 16}"])
    with pytest.raises(
        SrganError, match=r"the config asks for feature_channels 16 \(model\.options\.feature_channels\)"
    ):
        read_init_files(asked)  # a run's options are checked as a community file's are, not overwritten


def test_an_option_that_disagrees_with_the_file_is_named(srgan, photo_dir, tmp_path):
    path, _, _ = community_file("span", tmp_path)
    settings = overrides(
        "span", photo_dir, tmp_path / "run", f"model.init_from={path}", "model.options={feature_channels: 16}"
    )
    result = srgan("train", *set_args(settings))
    assert_refused(
        result, "has feature_channels 8, the config asks for feature_channels 16 (model.options.feature_channels)"
    )
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    shown = srgan("config", "show", *set_args([f"model.init_from={path}", "model.arch=srresnet"]))
    assert_refused(shown, "has arch span, the config asks for arch srresnet (model.arch)")


def test_an_option_the_file_agrees_with_is_taken(srgan, tmp_path):
    path, _, _ = community_file("span", tmp_path)
    shown = srgan(
        "config",
        "show",
        *set_args(["model.arch=span", f"model.init_from={path}", "model.options={feature_channels: 8}"]),
    )
    assert shown.returncode == 0, shown
    assert yaml.safe_load(shown.stdout)["model"]["options"]["img_range"] == 255.0


def test_an_unrecognised_file_is_refused_for_training_as_before(srgan, photo_dir, tmp_path):
    torch.save(
        {"encoder.0.weight": torch.ones(4, 3, 3, 3), "decoder.weight": torch.ones(3, 4, 1, 1)}, tmp_path / "x.pth"
    )
    settings = overrides("span", photo_dir, tmp_path / "run", f"model.init_from={tmp_path / 'x.pth'}")
    result = srgan("train", *set_args(settings))
    assert_refused(result, "fit no generator srgan knows")
    assert len(result.stderr.strip().splitlines()) == 1 and str(tmp_path / "x.pth") in result.stderr
    assert not (tmp_path / "run").exists()


def test_an_architecture_spandrel_runs_but_srgan_does_not_train_is_refused(srgan, photo_dir, tmp_path):
    path = save(esrgan_sequential(1, 8, scale=8), tmp_path / "x8.pth", "top")  # spandrel's ESRGAN, x8
    result = srgan("train", *set_args(overrides("span", photo_dir, tmp_path / "run", f"model.init_from={path}")))
    assert_refused(result, "an architecture srgan runs but does not train")
    assert "spandrel reads it as ESRGAN (through spandrel), x8" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


# The other architectures srgan trains, tiny: each built by srgan, its network's
# weights saved as a bare community state dict, then named by model.init_from.
OTHERS = {
    "hat": "{embed_dim: 12, depths: [1], num_heads: [2], window_size: 4, num_feat: 8, squeeze_factor: 2}",
    "swin2sr": "{embed_dim: 12, depths: [1], num_heads: [2], window_size: 4}",
    "drct": "{embed_dim: 12, depths: [1], num_heads: [2], window_size: 4}",
    "fdat": "{embed_dim: 16, num_heads: 2, window_size: 4}",
    "omnisr": "{num_feat: 8, window_size: 4}",
    "plksr": "{dim: 8, n_blocks: 1}",
    "rcan": "{n_resgroups: 1, n_resblocks: 1, n_feats: 8, reduction: 2}",
    "mosr": "{dim: 8, n_block: 1}",
    "moesr": "{dim: 8, n_blocks: 1}",
    "rgt": "{embed_dim: 32, depth: [1], num_heads: [2], split_size: [4, 8]}",
    "craft": "{embed_dim: 32, depths: [1], num_heads: [2]}",
    "atd": "{embed_dim: 24, depths: [2], num_heads: [2], window_size: 8, upsampler: pixelshuffle}",
    "safmn": "{dim: 8, n_blocks: 1}",
    "ditn": "{dim: 8, ITL_blocks: 1, SAL_blocks: 1, UFONE_blocks: 1}",
    "dctlsa": "{nf: 20, num_modules: 6, num_head: 5}",
    "seemore": "{num_experts: 2, num_layers: 1, embedding_dim: 8, topk: 1}",
}


@pytest.mark.parametrize("arch", OTHERS)
def test_every_other_architecture_starts_from_a_community_file_of_it(arch, tmp_path):
    """The file's architecture and options come from spandrel's reading of it,
    and its weights load strictly into the network the completed config builds."""
    from srgan.models import build_generator
    from srgan.training.init_from import read_init_files

    torch.manual_seed(0)
    built = build_generator(load_config("demo", [f"model.arch={arch}", f"model.options={OTHERS[arch]}"]).model)
    weights = built.network.state_dict()
    torch.save(weights, tmp_path / f"{arch}.pth")
    init = read_init_files(load_config("demo", [f"model.arch={arch}", f"model.init_from={tmp_path / f'{arch}.pth'}"]))
    assert init.config.model.arch == arch and init.generator is not None
    generator = build_generator(init.config.model)
    generator.load_state_dict(init.generator, strict=True)
    assert all(torch.equal(generator.network.state_dict()[key], tensor) for key, tensor in weights.items())
