"""The VGG perceptual loss: the distance (MSE, or L1 as ESRGAN) between frozen
VGG feature maps of SR and HR, at one layer or a weighted sum over several."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from srgan.configs.networks import VGG_BLOCKS, perceptual_layers, vgg_layer_count
from srgan.configs.schema import PerceptualConfig
from srgan.files import read_torch_file
from srgan.files.errors import SrganError, first_line

log = logging.getLogger("srgan")

_IMAGENET_WEIGHTS = {
    "vgg16": torchvision.models.VGG16_Weights.IMAGENET1K_V1,
    "vgg19": torchvision.models.VGG19_Weights.IMAGENET1K_V1,
}
_WIDTHS = (64, 128, 256, 512, 512)


def vgg_features(network: str, count: int) -> nn.Sequential:
    """The first `count` modules of torchvision's VGG `features`, laid out
    (and indexed) the same, so its state dicts load. It never builds the
    classifier, which holds most of VGG's parameters."""
    layers: list[nn.Module] = []
    c_in = 3
    for convs, width in zip(VGG_BLOCKS[network], _WIDTHS, strict=True):
        for _ in range(convs):
            layers += [nn.Conv2d(c_in, width, 3, padding=1), nn.ReLU(inplace=True)]
            c_in = width
        layers.append(nn.MaxPool2d(2, 2))
    return nn.Sequential(*layers[:count])


class VGGFeatures(nn.Module):
    """VGG `features` up to the deepest of the named layers, frozen, always in
    eval mode, on images in [0, 1] (it applies the ImageNet normalisation
    itself). `layers`: one layer name, or names -> weights; the `layers`
    attribute keeps them as a dict for perceptual_loss."""

    mean: torch.Tensor  # buffers
    std: torch.Tensor

    def __init__(self, network: str, layers: str | dict[str, float], state_dict: dict[str, torch.Tensor] | None):
        super().__init__()
        self.layers = {layers: 1.0} if isinstance(layers, str) else dict(layers)
        # the index in `features` of each layer's module (a feature is its output)
        self.taken = {_layer_count(network, name) - 1: name for name in self.layers}
        self.features = vgg_features(network, max(self.taken) + 1)
        if state_dict is not None:
            self.features.load_state_dict(state_dict)
        self.features.requires_grad_(False)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.eval()

    def train(self, mode: bool = True) -> VGGFeatures:
        return super().train(False)  # a fixed feature extractor: never train mode

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each named layer's output, from one pass that stops at the deepest."""
        out = {}
        x = (x - self.mean) / self.std
        last = len(self.features) - 1
        for index, module in enumerate(self.features):
            x = module(x)
            if index in self.taken:
                # a conv's output is what the next ReLU(inplace=True) overwrites: keep a copy
                overwritten = index < last and getattr(self.features[index + 1], "inplace", False)
                out[self.taken[index]] = x.clone() if overwritten else x
        return out


def _layer_count(network: str, layer: str) -> int:
    count = vgg_layer_count(network, layer)
    assert count is not None, layer  # the config's checks refuse any other name
    return count


def perceptual_loss(features: VGGFeatures, sr: torch.Tensor, hr: torch.Tensor, criterion: str = "mse") -> torch.Tensor:
    """The weighted sum over the layers of the mean distance (mse or l1)
    between feature maps; the HR branch needs no graph."""
    distance = F.l1_loss if criterion == "l1" else F.mse_loss
    with torch.no_grad():
        targets = features(hr)
    ours = features(sr)
    terms = [weight * distance(ours[name].float(), targets[name].float()) for name, weight in features.layers.items()]
    return torch.stack(terms).sum()


def build_vgg_features(config: PerceptualConfig) -> VGGFeatures:
    """The feature network the config asks for. Raises SrganError when
    `weights: imagenet` is neither cached nor downloadable (naming the
    alternatives), or when a state-dict path is missing, unreadable or does
    not fit the network."""
    layers = perceptual_layers(config)
    count = max(_layer_count(config.network, name) for name in layers)
    choice = config.weights
    if choice == "none":
        return VGGFeatures(config.network, layers, None)
    if choice in ("imagenet", "auto"):
        weights = _IMAGENET_WEIGHTS[config.network]
        cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
        if choice == "auto" and not cached.is_file():
            log.warning(
                "loss.perceptual.weights: auto: no ImageNet %s weights in %s; the perceptual loss uses "
                "randomly initialised features (put %s there for the real thing)",
                config.network,
                cached.parent,
                cached.name,
            )
            return VGGFeatures(config.network, layers, None)
        if not cached.is_file():
            try:  # only downloads into the cache: the code below reads it with the checks of a file the user names
                weights.get_state_dict(progress=False, weights_only=True, check_hash=True)
            except Exception as error:  # a download can fail in many ways; all mean the same here
                raise SrganError(
                    f"loss.perceptual.weights: imagenet: {config.network} ImageNet weights are not in {cached} "
                    f"and could not be downloaded ({first_line(error)}); put the file there, "
                    "or set loss.perceptual.weights to auto (random features when missing), none, "
                    "or the path of a VGG state dict"
                ) from None
        path = cached
    else:
        path = Path(choice).expanduser()
        if not path.is_file():
            raise SrganError(
                f"loss.perceptual.weights: {choice}: no such file (expected imagenet, auto, none or a state-dict path)"
            )
    try:
        full = read_torch_file(path, "VGG state dict")
    except SrganError as error:
        raise SrganError(f"loss.perceptual.weights: {error}") from None
    return _with_weights(config, _features_part(full, count, str(path)), str(path))


def _with_weights(config: PerceptualConfig, state: dict[str, torch.Tensor], origin: str) -> VGGFeatures:
    layers = perceptual_layers(config)
    deepest = max(layers, key=lambda name: _layer_count(config.network, name))
    try:
        return VGGFeatures(config.network, layers, state)
    except (RuntimeError, TypeError, AttributeError, ValueError) as error:  # missing keys, wrong shapes or types
        raise SrganError(
            f"loss.perceptual.weights: {origin}: does not fit {config.network} up to {deepest} ({first_line(error)})"
        ) from None


def _features_part(state: object, count: int, origin: str) -> dict[str, torch.Tensor]:
    """The tensors of features[:count], from a whole VGG state dict
    (features.N.weight ...) or one of `features` alone (N.weight ...)."""
    if not isinstance(state, dict):
        raise SrganError(f"loss.perceptual.weights: {origin}: expected a state dict")
    if any(str(k).startswith("features.") for k in state):
        state = {k[len("features.") :]: v for k, v in state.items() if k.startswith("features.")}
    wanted = {}
    for key, value in state.items():
        head = str(key).split(".")[0]
        if head.isdigit() and int(head) < count:
            wanted[key] = value
    if not wanted:
        raise SrganError(f"loss.perceptual.weights: {origin}: holds no VGG feature weights")
    return wanted
