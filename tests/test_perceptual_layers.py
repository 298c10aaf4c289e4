"""loss.perceptual.layers and .criterion: every layer's features from one
VGG pass equal torchvision's VGG run up to that layer alone, and the config
cannot name a single layer and several at once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchvision

from conftest import assert_refused, set_args, tiny_overrides
from srgan.configs import config_from_dict, config_to_dict, load_config
from srgan.configs.schema import PerceptualConfig
from srgan.losses import VGGFeatures, build_vgg_features, perceptual_loss
from srgan.models import resolve_runtime
from srgan.training.loop import build_parts

REAL_ESRGAN = {"conv1_2": 0.1, "conv2_2": 0.1, "conv3_4": 1.0, "conv4_4": 1.0, "conv5_4": 1.0}
# torchvision's vgg19().features indices of those convs (and of a ReLU and a pool)
TORCHVISION_INDEX = {"conv1_2": 2, "conv2_2": 7, "conv3_4": 16, "conv4_4": 25, "conv5_4": 34, "relu3_1": 11, "pool2": 9}
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


@pytest.fixture(scope="module")
def torchvision_vgg19():
    torch.manual_seed(0)
    return torchvision.models.vgg19(weights=None).features.eval()


def test_each_layer_equals_torchvision_vgg_run_up_to_it(torchvision_vgg19):
    layers = {**REAL_ESRGAN, "relu3_1": 0.5, "pool2": 0.5}
    ours = VGGFeatures("vgg19", layers, torchvision_vgg19.state_dict())
    assert len(ours.features) == TORCHVISION_INDEX["conv5_4"] + 1  # stops at the deepest
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    got = ours(x)
    assert set(got) == set(layers)
    with torch.no_grad():
        for name, index in TORCHVISION_INDEX.items():
            # a fresh pass that ends at the layer: nothing after it can overwrite it
            expected = torchvision_vgg19[: index + 1]((x - MEAN) / STD)
            assert torch.allclose(got[name], expected, rtol=1e-5, atol=1e-6), name
            if name.startswith("conv"):  # a conv's output has negative values: a ReLU did not overwrite it
                assert (got[name] < 0).any(), name


def test_the_weighted_sum_of_distances_with_l1_and_mse(torchvision_vgg19):
    sr = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    hr = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    ours = VGGFeatures("vgg19", REAL_ESRGAN, torchvision_vgg19.state_dict())
    with torch.no_grad():

        def feature(x, name):
            return torchvision_vgg19[: TORCHVISION_INDEX[name] + 1]((x - MEAN) / STD)

        for criterion, distance in (("l1", F.l1_loss), ("mse", F.mse_loss)):
            expected = sum(w * distance(feature(sr, n), feature(hr, n)) for n, w in REAL_ESRGAN.items())
            got = perceptual_loss(ours, sr, hr, criterion)
            assert got.item() == pytest.approx(expected.item(), rel=1e-5), criterion


def test_one_vgg_pass_serves_every_layer():
    vgg = VGGFeatures("vgg19", REAL_ESRGAN, None)
    passes = []
    vgg.features[0].register_forward_hook(lambda *_: passes.append(1))
    perceptual_loss(vgg, torch.rand(1, 3, 32, 32), torch.rand(1, 3, 32, 32), "l1")
    assert len(passes) == 2  # SR and HR, once each


def test_the_gradient_reaches_sr_through_every_layer():
    """The loss's gradient is the sum of each layer's own (each layer's
    weighted distance on a fresh pass up to it), and every layer's own is a
    large part of it: a layer whose features were detached would be missing."""
    layers = {"conv1_2": 0.5, "conv2_2": 1.0, "relu3_1": 2.0}
    vgg = VGGFeatures("vgg19", layers, None)
    sr = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(6), requires_grad=True)
    hr = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(7))
    (total,) = torch.autograd.grad(perceptual_loss(vgg, sr, hr, "l1"), sr)
    alone = {}
    for name, weight in layers.items():
        up_to = vgg.features[: TORCHVISION_INDEX[name] + 1]
        distance = weight * F.l1_loss(up_to((sr - MEAN) / STD), up_to((hr - MEAN) / STD))
        (alone[name],) = torch.autograd.grad(distance, sr)
    torch.testing.assert_close(total, sum(alone.values()), rtol=1e-4, atol=1e-9)
    for name, grad in alone.items():
        assert grad.norm() > 0.05 * total.norm(), name  # leaving it out would show


def test_a_config_gives_layer_or_layers_and_the_resolved_config_says_which(photo_dir, tmp_path, srgan):
    flow = "{conv1_2: 0.1, conv2_2: 1}"
    config = load_config(
        "demo", ["loss.perceptual.layer=null", f"loss.perceptual.layers={flow}", "loss.perceptual.criterion=l1"]
    )
    assert config.loss.perceptual.layer is None
    assert config.loss.perceptual.layers == {"conv1_2": 0.1, "conv2_2": 1.0}
    again = config_from_dict(config_to_dict(config))  # as a run folder's config.yaml or a checkpoint reads back
    assert again.loss.perceptual == config.loss.perceptual
    # a preset's own layer is replaced by layers only when it is set to null: both given could mean either
    both = tiny_overrides(photo_dir, tmp_path / "a", f"loss.perceptual.layers={flow}")
    assert_refused(srgan("train", *set_args(both)), "loss.perceptual: layer 'relu1_2' and layers both given")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    "value, culprit",
    [
        ("{conv9_9: 1}", "loss.perceptual.layers: expected a vgg19 layer such as relu5_4"),
        ("{conv1_2: -1}", "loss.perceptual.layers.conv1_2: expected a positive weight"),
        ("{conv1_2: heavy}", "loss.perceptual.layers.conv1_2: expected a number"),
        ("{}", "loss.perceptual.layers: expected at least one layer"),
        ("[conv1_2]", "loss.perceptual.layers: expected a mapping"),
    ],
)
def test_bad_layers_are_refused_naming_the_key(srgan, tmp_path, photo_dir, value, culprit):
    overrides = tiny_overrides(
        photo_dir,
        tmp_path / "run",
        "loss.perceptual.layer=null",
        "loss.perceptual.network=vgg19",
        f"loss.perceptual.layers={value}",
    )
    assert_refused(srgan("train", *set_args(overrides)), culprit)


def test_layer_null_alone_is_refused(srgan, tmp_path, photo_dir):
    overrides = tiny_overrides(photo_dir, tmp_path / "run", "loss.perceptual.layer=null")
    assert_refused(srgan("train", *set_args(overrides)), "loss.perceptual.layer: expected a VGG layer")


def test_the_crop_must_reach_the_deepest_layer(srgan, tmp_path, photo_dir):
    overrides = tiny_overrides(
        photo_dir,
        tmp_path / "run",
        "loss.perceptual.layer=null",
        "loss.weights.perceptual=1",
        "loss.perceptual.layers={conv1_1: 1, pool5: 1}",
        "data.crop_size=16",
    )
    assert_refused(
        srgan("train", *set_args(overrides)),
        "data.crop_size: expected at least 32 px: loss.perceptual.layers pool5 comes after 5",
    )


def test_a_run_trains_on_several_layers_with_l1(srgan, tmp_path, photo_dir):
    run = tmp_path / "run"
    overrides = tiny_overrides(
        photo_dir,
        run,
        "loss.perceptual.layer=null",
        "loss.weights.perceptual=1",
        "loss.perceptual.layers={conv1_2: 0.1, conv2_2: 0.1, conv3_4: 1}",
        "loss.perceptual.network=vgg19",
        "loss.perceptual.criterion=l1",
    )
    assert srgan("train", *set_args(overrides)).returncode == 0
    saved = (run / "config.yaml").read_text()
    assert "layer: null" in saved and "conv3_4: 1.0" in saved and "criterion: l1" in saved


def test_a_weights_file_is_read_up_to_the_deepest_layer(tmp_path, torchvision_vgg19):
    path = tmp_path / "vgg19.pth"
    torch.save(torchvision_vgg19.state_dict(), path)
    vgg = build_vgg_features(PerceptualConfig("vgg19", None, str(path), {"conv1_2": 1.0, "conv2_2": 1.0}, "l1"))
    assert len(vgg.features) == TORCHVISION_INDEX["conv2_2"] + 1
    assert torch.equal(vgg.features[5].weight, torchvision_vgg19[5].weight)


def test_the_criterion_a_config_builds_weighs_each_layers_l1_distance(torchvision_vgg19, tmp_path):
    """End to end: loss.perceptual.layers, .criterion l1 and .weights (a
    file of torchvision's VGG19 features, random values) in a config, the criterion
    srgan trains with built from it; its perceptual term is the layer
    weights' sum of torchvision's VGG19, run layer by layer, L1 distances."""
    layers = {"conv1_2": 0.1, "conv2_2": 1.0, "relu3_1": 0.5}
    path = tmp_path / "vgg19.pth"  # features up to relu3_1's (the file's deeper convs would not be read)
    torch.save({k: v for k, v in torchvision_vgg19.state_dict().items() if int(k.split(".")[0]) <= 11}, path)
    config = load_config(
        "demo",
        [
            "loss.perceptual.layer=null",
            "loss.perceptual.network=vgg19",
            "loss.perceptual.layers={conv1_2: 0.1, conv2_2: 1, relu3_1: 0.5}",
            "loss.perceptual.criterion=l1",
            f"loss.perceptual.weights={path}",
            "loss.weights.perceptual=0.25",
            "loss.weights.image=0",
            "loss.weights.tv=0",
        ],
    )
    criterion = build_parts(config, resolve_runtime("cpu", "fp32")).criterion
    sr = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    hr = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        total, terms = criterion(sr, hr, None)  # None: no adversarial term (as pretraining)

        def distances(distance):
            h_sr, h_hr, out = (sr - MEAN) / STD, (hr - MEAN) / STD, {}
            for index, (layer_sr, layer_hr) in enumerate(zip(torchvision_vgg19, torchvision_vgg19, strict=True)):
                h_sr, h_hr = layer_sr(h_sr.clone()), layer_hr(h_hr.clone())  # clone: the ReLUs work in place
                out.update({n: distance(h_sr, h_hr).item() for n in layers if TORCHVISION_INDEX[n] == index})
                if index == max(TORCHVISION_INDEX[n] for n in layers):
                    return out
            raise AssertionError("the layers are all in features")

        l1, mse = distances(F.l1_loss), distances(F.mse_loss)
    expected = sum(weight * l1[name] for name, weight in layers.items())
    assert set(terms) == {"perceptual"}
    assert terms["perceptual"].item() == pytest.approx(expected, rel=1e-5)
    assert total.item() == pytest.approx(0.25 * expected, rel=1e-5)
    # what the other criterion, or the layers unweighted, would give: far from it
    assert abs(sum(weight * mse[name] for name, weight in layers.items()) - expected) > 0.1 * expected
    assert abs(sum(l1.values()) - expected) > 0.1 * expected
