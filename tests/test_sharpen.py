"""loss.sharpen_targets: the unsharp mask against its formula written out
here, the terms that ask for it compared with the sharpened HR (and D's
real examples sharpened), and nothing sharpened by default."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from conftest import loss_without_vgg, step_parts
from srgan.configs import load_config
from srgan.configs.schema import SharpenTargets
from srgan.files.errors import SrganError
from srgan.losses import image_loss, perceptual_loss
from srgan.losses.sharpen import unsharp_mask
from srgan.models import Discriminator, Generator
from srgan.training import TrainingParts, gan_step
from srgan.training.step import generator_step


def reference_usm(image: np.ndarray) -> np.ndarray:
    """CxHxW float64 in [0, 1]: BasicSR's USMSharp(radius 50) with weight 0.5,
    threshold 10, written out with a 2-D 51 x 51 kernel."""
    size = 51
    sigma = 0.3 * ((size - 1) * 0.5 - 1) + 0.8  # OpenCV's getGaussianKernel(51, 0)
    x = np.arange(size) - (size - 1) / 2
    g = np.exp(-(x**2) / (2 * sigma**2))
    kernel = np.outer(g / g.sum(), g / g.sum())

    def blur(a: np.ndarray) -> np.ndarray:
        padded = np.pad(a, ((0, 0), (25, 25), (25, 25)), mode="reflect")
        windows = np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(1, 2))
        return np.einsum("chwij,ij->chw", windows, kernel)

    residual = image - blur(image)
    soft_mask = blur((np.abs(residual) * 255 > 10).astype(np.float64))
    sharp = np.clip(image + 0.5 * residual, 0, 1)
    return soft_mask * sharp + (1 - soft_mask) * image


def test_the_unsharp_mask_is_its_formula():
    image = torch.rand(2, 3, 40, 33, generator=torch.Generator().manual_seed(0))
    ours = unsharp_mask(image)
    for n in range(2):
        expected = reference_usm(image[n].double().numpy())
        assert np.abs(ours[n].double().numpy() - expected).max() < 2e-6
    assert not torch.equal(ours, image)


def make_parts(sharpen: SharpenTargets, perceptual: float = 0.0) -> TrainingParts:
    torch.manual_seed(0)
    g, d = Generator(2, 1, 8), Discriminator(8)
    loss = loss_without_vgg(image=1.0, perceptual=perceptual)
    loss.sharpen_targets = sharpen
    return step_parts(g, d, loss)


def batch():
    gen = torch.Generator().manual_seed(1)
    return torch.rand(2, 3, 16, 16, generator=gen), torch.rand(2, 3, 32, 32, generator=gen)


def test_the_terms_that_ask_compare_with_the_sharpened_hr_and_d_sees_it_as_real():
    parts = make_parts(SharpenTargets(image=True, perceptual=True, adversarial=True), perceptual=6e-3)
    G0, D0, vgg = copy.deepcopy(parts.generator), copy.deepcopy(parts.discriminator), parts.criterion.vgg
    assert vgg is not None
    lr, hr = batch()
    row = gan_step(parts, lr, hr)
    with torch.no_grad():
        fake, sharp = G0(lr), unsharp_mask(hr)
        assert torch.equal(row["image"], image_loss(fake, sharp, "mse"))
        assert torch.equal(row["perceptual"], perceptual_loss(vgg, fake, sharp, "mse"))
        assert row["image"] != image_loss(fake, hr, "mse")
        assert torch.equal(row["d_score"], torch.sigmoid(D0(sharp)).mean())


def test_generator_pretraining_sharpens_the_image_target_only_when_asked():
    lr, hr = batch()
    for sharpen, target in ((SharpenTargets(image=True), unsharp_mask(hr)), (SharpenTargets(), hr)):
        parts = make_parts(sharpen)
        G0 = copy.deepcopy(parts.generator)
        row = generator_step(parts, lr, hr, image_only=True)
        with torch.no_grad():
            assert torch.equal(row["image"], image_loss(G0(lr), target, "mse"))


def test_nothing_is_sharpened_by_default(monkeypatch):
    def refuse(hr):
        raise AssertionError("unsharp_mask called with every loss.sharpen_targets false")

    monkeypatch.setattr("srgan.training.step.unsharp_mask", refuse)
    parts = make_parts(SharpenTargets())
    lr, hr = batch()
    gan_step(parts, lr, hr)
    generator_step(parts, lr, hr)
    assert load_config("demo").loss.sharpen_targets == SharpenTargets(False, False, False)


def test_a_crop_the_mask_cannot_reflect_into_is_refused():
    with pytest.raises(SrganError, match="data.crop_size: expected more than 25 px with loss.sharpen_targets"):
        load_config("demo", ["data.crop_size=16", "loss.sharpen_targets.image=true"])
