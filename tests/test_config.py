import dataclasses
import subprocess
import sys

import pytest
import yaml

from srgan.configs import config_from_dict, config_to_dict, load_config, preset_names
from srgan.configs.networks import vgg_layer_count
from srgan.files.errors import SrganError


def test_presets_are_listed():
    assert set(preset_names()) >= {"demo", "srresnet_x4", "srgan_x4", "leftthomas_x4", "compact_x4", "esrgan_x4"}


def test_no_config_means_demo():
    assert load_config(None).name == "demo"


@pytest.mark.parametrize("name", ["demo", "srresnet_x4", "srgan_x4", "leftthomas_x4", "compact_x4", "esrgan_x4"])
def test_every_preset_spells_out_every_key(name):
    """Every choice lives in the YAML: a preset lists each key of the schema
    that applies to its model.arch."""
    from importlib import resources

    raw = yaml.safe_load((resources.files("srgan.configs") / f"{name}.yaml").read_text())

    def keys(d, prefix=""):
        out = set()
        for k, v in d.items():
            out |= keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
        return out

    assert keys(raw) == keys(config_to_dict(load_config(name)))


def test_paper_and_leftthomas_settings():
    paper = load_config("srgan_x4")
    assert (paper.model.blocks, paper.data.crop_size, paper.data.batch_size) == (16, 96, 16)
    assert paper.train.lr_g == 1e-4 and paper.loss.perceptual.network == "vgg19"
    assert paper.train.lr_schedule.milestones == [100000] and paper.train.max_steps == 200000
    assert load_config("srresnet_x4").loss.weights.adversarial == 0
    lt = load_config("leftthomas_x4")
    assert (lt.model.blocks, lt.data.crop_size, lt.data.batch_size, lt.train.lr_g) == (5, 88, 64, 1e-3)
    assert (lt.loss.perceptual.network, lt.loss.perceptual.layer) == ("vgg16", "pool5")
    assert vgg_layer_count("vgg16", "pool5") == 31  # leftthomas' features[:31]
    assert vgg_layer_count("vgg19", "relu5_4") == 36
    w = lt.loss.weights
    assert (w.image, w.adversarial, w.perceptual, w.tv) == (1.0, 0.001, 0.006, 2e-8)
    assert lt.gan.d_loss == "linear"


def test_esrgan_settings_are_the_papers():
    e = load_config("esrgan_x4")
    assert (e.model.arch, e.model.blocks, e.model.channels, e.model.growth) == ("rrdb", 23, 64, 32)
    assert (e.data.crop_size, e.data.batch_size, e.gan.discriminator, e.gan.d_loss) == (128, 16, "vgg", "relativistic")
    w = e.loss.weights
    assert (e.loss.image, w.image, w.perceptual, w.adversarial) == ("l1", 0.01, 1.0, 0.005)
    p = e.loss.perceptual
    assert (p.network, p.layer, p.criterion) == ("vgg19", "conv5_4", "l1")
    s = e.train.lr_schedule
    assert (e.train.lr_g, s.milestones, s.gamma) == (1e-4, [50000, 100000, 200000, 300000], 0.5)


def test_overrides_are_yaml_scalars():
    c = load_config(
        "demo", ["train.epochs=3", "data.val=null", "train.lr_g=2e-4", "gan.update=detach", "train.betas=[0.5, 0.9]"]
    )
    assert c.train.epochs == 3 and c.data.val is None and c.train.lr_g == 2e-4
    assert c.gan.update == "detach" and c.train.betas == [0.5, 0.9]


def test_a_file_by_path_with_its_stem_as_name(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  scale: 2\ndata:\n  crop_size: 48\n")
    c = load_config(str(path))
    assert c.name == "mine" and c.model.scale == 2 and c.model.blocks == 16  # defaults fill the rest


def test_unknown_key_names_the_dotted_path_and_the_closest_name():
    with pytest.raises(SrganError, match=r"unknown key model\.sclae \(did you mean 'scale'\?\)"):
        load_config("demo", ["model.sclae=4"])


def test_unknown_key_in_a_file_names_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  epoch: 3\n")
    with pytest.raises(SrganError, match=r"bad\.yaml: unknown key train\.epoch \(did you mean 'epochs'\?\)"):
        load_config(str(path))


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.epochs=many", r"train\.epochs: expected an integer, got 'many'"),
        ("train.lr_g=fast", r"train\.lr_g: expected a number, got 'fast'"),
        ("model.scale=1", r"model\.scale: expected 2, 3, 4 or 8 with model\.arch srresnet, got 1"),
        ("loss.image=l3", r"loss\.image: expected one of mse, l1, got 'l3'"),
        ("data.crop_size=66", r"data\.crop_size: expected a multiple of model\.scale \(4\), got 66"),
        ("loss.perceptual.layer=relu9_9", r"loss\.perceptual\.layer: expected a vgg16 layer"),
        ("train.epochs=true", r"train\.epochs: expected an integer, got True"),
        ("data=3", r"data: expected a mapping"),
    ],
)
def test_wrong_values_name_key_expectation_and_value(override, message):
    with pytest.raises(SrganError, match=message):
        load_config("demo", [override])


def test_override_needs_an_equals_sign():
    with pytest.raises(SrganError, match=r"expected key\.path=value"):
        load_config("demo", ["train.epochs"])


def test_unknown_preset_suggests_one():
    with pytest.raises(SrganError, match=r"no preset named 'dmeo' \(did you mean 'demo'\?\)"):
        load_config("dmeo")


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  scale: [4\n")
    with pytest.raises(SrganError, match=r"broken\.yaml: line \d"):
        load_config(str(path))


def test_round_trip_through_a_plain_dict():
    c = load_config("leftthomas_x4", ["model.scale=8", "data.crop_size=96"])
    assert config_from_dict(config_to_dict(c)) == c
    assert dataclasses.asdict(c)["model"]["scale"] == 8


def test_loading_and_checking_a_config_imports_no_torch():
    """The network arithmetic the checks need (configs/networks.py) stays
    below models/ and losses/, whose packages import torch."""
    code = "import sys; from srgan.configs import load_config; load_config('esrgan_x4'); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
