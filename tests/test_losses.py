import os
import subprocess
import sys

import pytest
import torch

from srgan.configs.schema import LossConfig, PerceptualConfig
from srgan.files.errors import SrganError
from srgan.losses import GeneratorCriterion, VGGFeatures, build_vgg_features, perceptual_loss, tv_loss
from srgan.models import Generator


def test_tv_of_a_constant_image_is_zero_and_of_a_ramp_is_known():
    assert tv_loss(torch.full((2, 3, 8, 8), 0.3)).item() == 0
    ramp = torch.arange(8.0).view(1, 1, 1, 8).expand(1, 1, 8, 8)  # horizontal steps of 1
    assert tv_loss(ramp).item() == pytest.approx(2.0)


def test_perceptual_of_identical_images_is_zero_and_vgg_stays_frozen():
    vgg = VGGFeatures("vgg16", "relu2_2", None)
    x = torch.rand(2, 3, 32, 32)
    assert perceptual_loss(vgg, x, x.clone()).item() == 0
    assert perceptual_loss(vgg, x, torch.rand(2, 3, 32, 32)).item() > 0
    vgg.train()
    assert not vgg.training and not any(p.requires_grad for p in vgg.parameters())
    assert len(vgg.features) == 9  # conv1_1 .. relu2_2


def test_every_term_sends_gradients_to_the_generator():
    torch.manual_seed(0)
    config = LossConfig(perceptual=PerceptualConfig("vgg16", "relu1_2", "none"))
    config.weights.image, config.weights.tv = 1.0, 1.0
    criterion = GeneratorCriterion(config, "bce")
    g = Generator(2, 1, 8)
    sr, hr = g(torch.rand(2, 3, 8, 8)), torch.rand(2, 3, 16, 16)
    logit = (sr.mean(dim=(1, 2, 3)) - 0.5) * 4  # a stand-in D(G(z)) that depends on G
    total, terms = criterion(sr, hr, logit)
    assert set(terms) == {"image", "adversarial", "perceptual", "tv"}
    for name, term in terms.items():
        grads = torch.autograd.grad(term, g.tail.weight, retain_graph=True)[0]
        assert grads.abs().sum() > 0, name
    weighted = sum(criterion.weights[n] * v for n, v in terms.items())
    assert torch.allclose(total, weighted)


def test_a_zero_weight_term_is_not_computed_nor_its_vgg_built():
    config = LossConfig()
    config.weights.perceptual = 0.0
    criterion = GeneratorCriterion(config, "bce")
    assert criterion.vgg is None
    _, terms = criterion(torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8), torch.zeros(1))
    assert "perceptual" not in terms and "tv" not in terms


def test_auto_without_cached_weights_warns_once_and_uses_random_features(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with caplog.at_level("WARNING", logger="srgan"):
        vgg = build_vgg_features(PerceptualConfig("vgg16", "relu1_2", "auto"))
    assert isinstance(vgg, VGGFeatures)
    assert len([r for r in caplog.records if "randomly initialised" in r.getMessage()]) == 1


def test_imagenet_weights_load_from_the_torch_cache(tmp_path, monkeypatch):
    """The real loading path (torchvision's weights, from the hub cache), fed
    a file written here: no download."""
    import torchvision

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    reference = torchvision.models.vgg16(weights=None)
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    # torchvision's layout (features.N.*); its classifier is left out to keep the file small
    features_only = {k: v for k, v in reference.state_dict().items() if k.startswith("features.")}
    torch.save(features_only, cache / "vgg16-397923af.pth")
    vgg = build_vgg_features(PerceptualConfig("vgg16", "conv2_1", "imagenet"))
    assert torch.equal(vgg.features[5].weight, reference.features[5].weight)
    vgg_auto = build_vgg_features(PerceptualConfig("vgg16", "conv2_1", "auto"))
    assert torch.equal(vgg_auto.features[0].weight, reference.features[0].weight)


def test_imagenet_weights_that_cannot_be_had_stop_with_the_alternatives(tmp_path):
    """A download that fails (through a dead proxy on loopback) is an error
    naming the other choices."""
    code = (
        "from srgan.losses import build_vgg_features\n"
        "from srgan.configs.schema import PerceptualConfig\n"
        "from srgan.files.errors import SrganError\n"
        "try:\n"
        "    build_vgg_features(PerceptualConfig('vgg16', 'relu1_2', 'imagenet'))\n"
        "except SrganError as e:\n"
        "    print(e)\n"
    )
    env = dict(os.environ, TORCH_HOME=str(tmp_path), https_proxy="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert "could not be downloaded" in out and "auto" in out and "none" in out


def test_our_features_are_torchvisions_layer_for_layer():
    import torchvision

    for network, count in (("vgg16", 31), ("vgg19", 36)):
        ours = VGGFeatures(network, "pool5" if network == "vgg16" else "relu5_4", None).features
        theirs = getattr(torchvision.models, network)(weights=None).features[:count]
        assert [repr(m) for m in ours] == [repr(m) for m in theirs]
        ours.load_state_dict(theirs.state_dict())  # the same keys and shapes


def test_a_state_dict_file_of_vgg_features(tmp_path):
    import torchvision

    features = torchvision.models.vgg19(weights=None).features
    path = tmp_path / "vgg.pt"
    torch.save(features.state_dict(), path)  # features-only keys: 0.weight ...
    vgg = build_vgg_features(PerceptualConfig("vgg19", "relu1_2", str(path)))
    assert torch.equal(vgg.features[2].weight, features[2].weight)
    torch.save({"0.weight": torch.zeros(1)}, path)
    with pytest.raises(SrganError, match="does not fit vgg19"):
        build_vgg_features(PerceptualConfig("vgg19", "relu1_2", str(path)))
    with pytest.raises(SrganError, match="no such file"):
        build_vgg_features(PerceptualConfig("vgg19", "relu1_2", str(tmp_path / "missing.pt")))
