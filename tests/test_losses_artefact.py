"""The artefact and colour terms (LDL, focal frequency, MS-SSIM + L1, colour,
luma): each against its formula written here independently in numpy (or
scikit-image), its gradient in a real step, its config checks, and a tiny
run whose files list the terms."""

import copy
import csv
import json

import numpy as np
import pytest
import torch
from scipy.signal import correlate2d
from skimage.color import rgb2ycbcr
from skimage.metrics import structural_similarity

from conftest import loss_without_vgg, step_parts
from srgan.configs import load_config
from srgan.configs.checks import LDL_WINDOW, MS_SSIM_WINDOW
from srgan.configs.schema import LossConfig, PerceptualConfig
from srgan.files.errors import SrganError
from srgan.losses import GeneratorCriterion
from srgan.losses.colour import colour_loss, luma_loss
from srgan.losses.frequency import focal_frequency_loss
from srgan.losses.ldl import WINDOW, artefact_map, ldl_loss
from srgan.losses.ms_ssim import WINDOW as SSIM_WINDOW
from srgan.losses.ms_ssim import ms_ssim, ms_ssim_l1_loss, scales_for
from srgan.models import Discriminator, Generator
from srgan.training import TrainingParts
from srgan.training.loop import describe
from srgan.training.step import generator_step
from tests.conftest import tiny_overrides

TERMS = ("ldl", "ffl", "ms_ssim", "colour", "luma")


def pair(shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=gen, dtype=torch.float64), torch.rand(shape, generator=gen, dtype=torch.float64)


# ---- LDL ----------------------------------------------------------------------------


def numpy_artefact_map(sr, hr, ema):
    """BasicSR's map, pixel by pixel: the residual summed over channels, the
    unbiased variance of its reflected 7x7 window, times the unbiased variance
    of the whole residual ^ 1/5, zero where the EMA residual is larger."""
    out = np.zeros((sr.shape[0], sr.shape[2], sr.shape[3]))
    for n in range(sr.shape[0]):
        residual = np.abs(hr[n] - sr[n]).sum(0)
        ema_residual = np.abs(hr[n] - ema[n]).sum(0)
        padded = np.pad(residual, 3, mode="reflect")
        for i in range(residual.shape[0]):
            for j in range(residual.shape[1]):
                local = np.var(padded[i : i + 7, j : j + 7], ddof=1)
                out[n, i, j] = 0.0 if residual[i, j] < ema_residual[i, j] else local * np.var(residual, ddof=1) ** 0.2
    return out


def test_ldl_map_and_loss_are_basicsrs_formula():
    sr, hr = pair((2, 3, 9, 10))
    ema = hr + (sr - hr) * torch.rand(sr.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 1.6
    expected = numpy_artefact_map(sr.numpy(), hr.numpy(), ema.numpy())
    got = artefact_map(sr, hr, ema)[:, 0].numpy()
    assert 0 < (expected == 0).mean() < 1  # the refinement zeroes some pixels, not all
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-14)
    loss = np.abs(expected[:, None] * sr.numpy() - expected[:, None] * hr.numpy()).mean()
    assert ldl_loss(sr, hr, ema).item() == pytest.approx(loss, rel=1e-10)
    assert WINDOW == LDL_WINDOW == 7  # the config check's window is the loss's


# ---- focal frequency ----------------------------------------------------------------


def dft(x):
    """The orthonormal 2-D DFT of an HxW array, as the sum over pixels (no FFT)."""
    h, w = x.shape
    u, v = np.arange(h), np.arange(w)
    rows = np.exp(-2j * np.pi * np.outer(u, u) / h)
    cols = np.exp(-2j * np.pi * np.outer(v, v) / w)
    return rows @ x @ cols.T / np.sqrt(h * w)


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_focal_frequency_loss_against_a_loop_over_the_frequencies(alpha):
    sr, hr = pair((2, 3, 6, 5), seed=1)
    hr[1, 2] = sr[1, 2]  # a channel already exact: its weights are 0, not NaN
    total, count = 0.0, 0
    for n in range(2):
        for c in range(3):
            f_sr, f_hr = dft(sr[n, c].numpy()), dft(hr[n, c].numpy())
            distances = np.zeros(f_sr.shape)
            for u in range(f_sr.shape[0]):
                for v in range(f_sr.shape[1]):
                    distances[u, v] = abs(f_sr[u, v] - f_hr[u, v]) ** 2
            weights = np.sqrt(distances) ** alpha
            weights = weights / weights.max() if weights.max() > 0 else weights
            total += (weights * distances).sum()
            count += distances.size
    assert focal_frequency_loss(sr, hr, alpha).item() == pytest.approx(total / count, rel=1e-6)


def test_focal_frequency_weights_carry_no_gradient():
    sr, hr = pair((1, 1, 6, 6), seed=2)
    sr.requires_grad_(True)
    (grad,) = torch.autograd.grad(focal_frequency_loss(sr, hr), sr)
    # with the weights held fixed the loss is mean(w |F(sr - hr)|^2), whose gradient
    # (F orthonormal and real input) is 2 Re(F^-1(w F(sr - hr))) / count
    d = sr.detach().numpy()[0, 0] - hr.numpy()[0, 0]
    f = np.fft.fft2(d, norm="ortho")
    w = np.abs(f) / np.abs(f).max()
    expected = 2 * np.real(np.fft.ifft2(w * f, norm="ortho")) / d.size
    np.testing.assert_allclose(grad[0, 0].numpy(), expected, rtol=1e-4, atol=1e-7)


# ---- MS-SSIM + L1 -------------------------------------------------------------------


def numpy_ms_ssim(a, b, scales):
    """Wang et al. 2003 on one HxW channel: cs at each scale but the last, SSIM
    at the last, the standard weights (the first `scales` of them, renormalised)."""
    weights = np.array([0.0448, 0.2856, 0.3001, 0.2363, 0.1333])[:scales]
    weights = weights / weights.sum()
    g = np.exp(-((np.arange(11) - 5) ** 2) / (2 * 1.5**2))
    window = np.outer(g, g) / np.outer(g, g).sum()
    c1, c2 = 0.01**2, 0.03**2
    result = 1.0
    for i in range(scales):

        def blur(x):
            return correlate2d(x, window, mode="valid")

        mu_a, mu_b = blur(a), blur(b)
        var_a, var_b, cov = blur(a * a) - mu_a**2, blur(b * b) - mu_b**2, blur(a * b) - mu_a * mu_b
        cs = (2 * cov + c2) / (var_a + var_b + c2)
        term = ((2 * mu_a * mu_b + c1) / (mu_a**2 + mu_b**2 + c1) * cs).mean() if i == scales - 1 else cs.mean()
        result *= max(term, 1e-6) ** weights[i]
        h, w = a.shape[0] // 2 * 2, a.shape[1] // 2 * 2
        a = a[:h, :w].reshape(h // 2, 2, w // 2, 2).mean((1, 3))
        b = b[:h, :w].reshape(h // 2, 2, w // 2, 2).mean((1, 3))
    return result


def similar_pair(shape, seed):
    """HR and an SR near it (noise on HR), so that SSIM is well above 0."""
    hr, noise = pair(shape, seed)
    smooth = torch.nn.functional.avg_pool2d(hr, 3, 1, 1)
    return (smooth + 0.1 * (noise - 0.5)).clamp(0, 1), smooth


def test_one_scale_is_scikit_images_gaussian_ssim():
    sr, hr = similar_pair((1, 2, 16, 18), seed=3)
    assert scales_for(16) == 1
    for c in range(2):
        expected = structural_similarity(
            sr[0, c].numpy(),
            hr[0, c].numpy(),
            gaussian_weights=True,
            sigma=1.5,
            use_sample_covariance=False,
            data_range=1,
        )
        assert ms_ssim(sr, hr)[0, c].item() == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("size, scales", [(33, 2), (64, 3), (97, 4), (176, 5)])
def test_ms_ssim_takes_the_scales_that_fit_with_renormalised_weights(size, scales):
    assert scales_for(size) == scales
    sr, hr = similar_pair((1, 1, size, size + 3), seed=4)
    expected = numpy_ms_ssim(sr[0, 0].numpy(), hr[0, 0].numpy(), scales)
    assert 0.1 < expected < 0.99
    assert ms_ssim(sr, hr)[0, 0].item() == pytest.approx(expected, rel=1e-9)


def test_ms_ssim_refuses_nothing_it_can_take_and_the_check_matches_its_window():
    assert scales_for(MS_SSIM_WINDOW - 1) == 0 and scales_for(MS_SSIM_WINDOW) == 1 and SSIM_WINDOW == MS_SSIM_WINDOW
    with pytest.raises(ValueError, match="at least 11 px"):
        ms_ssim(*pair((1, 1, 10, 40)))


@pytest.mark.parametrize("channel", ["rgb", "y"])
def test_the_mix_is_alpha_one_minus_ms_ssim_plus_the_rest_l1(channel):
    sr, hr = similar_pair((2, 3, 40, 36), seed=5)
    a, b = sr.numpy().transpose(0, 2, 3, 1), hr.numpy().transpose(0, 2, 3, 1)
    if channel == "y":
        a, b = rgb2ycbcr(a)[..., :1] / 255, rgb2ycbcr(b)[..., :1] / 255
    msssim = np.mean([numpy_ms_ssim(a[n, ..., c], b[n, ..., c], 2) for n in range(2) for c in range(a.shape[-1])])
    expected = 0.7 * (1 - msssim) + 0.3 * np.abs(a - b).mean()
    assert ms_ssim_l1_loss(sr, hr, 0.7, channel).item() == pytest.approx(expected, rel=1e-4)  # float32


# ---- colour and luma ----------------------------------------------------------------


def test_colour_loss_is_l1_of_block_averaged_chroma_and_luma_loss_l1_of_y():
    sr, hr = pair((2, 3, 20, 17), seed=6)
    a, b = rgb2ycbcr(sr.numpy().transpose(0, 2, 3, 1)) / 255, rgb2ycbcr(hr.numpy().transpose(0, 2, 3, 1)) / 255

    def blocks(x, k):  # the means of whole k x k blocks; a partial block at the edge is left out
        h, w = x.shape[1] // k * k, x.shape[2] // k * k
        return x[:, :h, :w].reshape(x.shape[0], h // k, k, w // k, k, -1).mean((2, 4))

    expected = np.abs(blocks(a[..., 1:], 4) - blocks(b[..., 1:], 4)).mean()
    assert colour_loss(sr, hr, 4).item() == pytest.approx(expected, rel=1e-5)  # float32
    assert luma_loss(sr, hr).item() == pytest.approx(np.abs(a[..., 0] - b[..., 0]).mean(), rel=1e-5)


def test_colour_loss_ignores_texture_that_keeps_the_colour_but_not_a_tint():
    hr = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(7))
    swapped = hr.clone()
    swapped[..., 0::2, :], swapped[..., 1::2, :] = hr[..., 1::2, :], hr[..., 0::2, :]  # texture moved inside blocks
    assert colour_loss(swapped, hr, 8).item() < 1e-7 and luma_loss(swapped, hr).item() > 0.05
    tinted = hr + torch.tensor([0.0, 0.0, 0.05]).view(1, 3, 1, 1)  # towards blue
    assert colour_loss(tinted, hr, 8).item() > 0.01


# ---- the criterion, the step, the configs -------------------------------------------


def parts_with(term: str) -> TrainingParts:
    """A tiny G and D, the criterion weighting `term` alone; the EMA generator
    a perturbed copy (LDL compares with it)."""
    torch.manual_seed(0)
    g, d = Generator(2, 1, 8), Discriminator(8)
    loss = loss_without_vgg(adversarial=0.0, perceptual=0.0, **{term: 1.0})
    ema = copy.deepcopy(g).requires_grad_(False)
    with torch.no_grad():
        for p in ema.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return step_parts(g, d, loss, ema=ema if term == "ldl" else None)


@pytest.mark.parametrize("term", TERMS)
def test_each_term_alone_trains_every_layer_of_the_generator(term):
    parts = parts_with(term)
    before = copy.deepcopy(parts.generator.state_dict())
    gen = torch.Generator().manual_seed(1)
    stats = generator_step(parts, torch.rand(2, 3, 12, 12, generator=gen), torch.rand(2, 3, 24, 24, generator=gen))
    assert set(stats) == {"g_loss", term} and stats[term].item() > 0
    for name, p in parts.generator.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert not torch.equal(p.detach(), before[name]), name


def test_zero_weighted_terms_are_not_computed_and_ldl_needs_the_ema_output():
    config = LossConfig(perceptual=PerceptualConfig("vgg16", "relu1_2", "none"))
    criterion = GeneratorCriterion(config, "bce")
    _, terms = criterion(torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16), torch.zeros(1))
    assert not set(terms) & set(TERMS) and not criterion.needs_ema
    config.weights.ldl = 1.0
    with pytest.raises(AssertionError, match="EMA"):
        GeneratorCriterion(config, "bce")(torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16), torch.zeros(1))


@pytest.mark.parametrize(
    "settings, key",
    [
        (["loss.weights.ldl=1", "train.ema_decay=0"], "train.ema_decay"),
        (["loss.weights.ffl=-1"], "loss.weights.ffl"),
        (["loss.ms_ssim.alpha=1.5"], "loss.ms_ssim.alpha"),
        (["loss.ffl.alpha=0"], "loss.ffl.alpha"),
        (["loss.weights.colour=1", "loss.colour.window=80"], "loss.colour.window"),
        (["loss.colour.window=0"], "loss.colour.window"),
    ],
)
def test_the_config_check_names_the_key(settings, key):
    with pytest.raises(SrganError, match=f": {key}: expected"):
        load_config("demo", settings)


def test_ldl_with_an_ema_and_every_term_pass_the_check():
    c = load_config("demo", ["loss.weights.ldl=1", "train.ema_decay=0.9", "loss.ms_ssim.channel=y"])
    assert (c.loss.weights.ldl, c.loss.ms_ssim.channel, c.loss.ms_ssim.alpha, c.loss.colour.window) == (
        1.0,
        "y",
        0.84,
        8,
    )


@pytest.mark.parametrize("name", ["esrgan_x4", "finetune_esrgan_x4", "realesrgan_x4", "finetune_realesrgan_x4"])
def test_the_esrgan_and_realesrgan_gan_stages_weight_ldl_as_the_ldl_configs(name):
    c = load_config(name)
    assert c.loss.weights.ldl == 1.0 and c.train.ema_decay > 0 and c.loss.weights.adversarial > 0


def test_the_progress_bar_shows_the_weighted_terms():
    text = describe(1, 2, {"d_loss": 0.5, "g_loss": 1.0, "ldl": 0.25, "luma": 0.125})
    assert text == "[1/2] d_loss 0.5000 g_loss 1.0000 ldl 0.2500 luma 0.1250"


def test_a_tiny_run_with_every_term_logs_them_in_its_files(photo_dir, tmp_path):
    from srgan.training import train

    weights = [f"loss.weights.{term}=0.5" for term in TERMS]
    config = load_config("demo", tiny_overrides(photo_dir, tmp_path / "run", *weights, "train.ema_decay=0.9"))
    train(config)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert all(np.isfinite(row[term]) and row[term] > 0 for term in TERMS), row
    with open(tmp_path / "run" / "epochs.csv") as f:
        (epoch,) = list(csv.DictReader(f))
    assert all(float(epoch[term]) > 0 for term in TERMS), epoch


def test_ldl_of_an_exact_image_is_zero_with_a_finite_gradient():
    hr = torch.rand(1, 3, 8, 8, dtype=torch.float64)
    sr = hr.clone().requires_grad_(True)
    loss = ldl_loss(sr, hr, hr + 0.1)
    (grad,) = torch.autograd.grad(loss, sr)
    assert loss.item() == 0 and torch.isfinite(grad).all()


def test_the_step_gives_ldl_the_ema_generators_output():
    parts = parts_with("ldl")
    gen = torch.Generator().manual_seed(2)
    lr, hr = torch.rand(2, 3, 12, 12, generator=gen), torch.rand(2, 3, 24, 24, generator=gen)
    assert parts.ema is not None
    with torch.no_grad():
        sr, ema_sr = parts.generator(lr), parts.ema(lr)
    expected, own = ldl_loss(sr, hr, ema_sr).item(), ldl_loss(sr, hr, sr).item()
    assert abs(expected - own) > 1e-3 * expected  # the EMA's output, not the generator's own, makes the map
    assert generator_step(parts, lr, hr)["ldl"].item() == pytest.approx(expected, rel=1e-5)


class NoForward(torch.nn.Module):
    def forward(self, x):
        raise AssertionError("the EMA generator ran though LDL is not weighted")


def test_without_ldl_the_step_runs_no_ema_forward():
    parts = parts_with("ffl")
    parts.ema = NoForward()
    stats = generator_step(parts, torch.rand(2, 3, 12, 12), torch.rand(2, 3, 24, 24))
    assert set(stats) == {"g_loss", "ffl"}
