"""data.degradation realesrgan: the config's refusals, the pipeline's
statistics, its determinism (any worker count, resume), `srgan degrade` and
`srgan evaluate --degrade`."""

from __future__ import annotations

import copy
import io
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from PIL import Image

from conftest import assert_refused, bare_checkpoint, interrupt_at, skimage_photo, tiny_overrides
from srgan.configs import config_from_dict, config_to_dict, load_config
from srgan.configs.schema import (
    BlurConfig,
    DegradationStage,
    FinalStep,
    KernelMix,
    NoiseConfig,
    RealEsrganDegradation,
    ResizeConfig,
)
from srgan.data import EpochSampler, TrainPairs, ValImages, open_images
from srgan.data import degradations as D
from srgan.data.sheets import GAP
from srgan.files.errors import SrganError
from srgan.inference.compare import model_input

# ---------------------------------------------------------------- the config


@pytest.mark.parametrize(
    "setting, culprit",
    [
        (
            "data.realesrgan.first.blur.sigma=[3.0, 0.2]",
            "data.realesrgan.first.blur.sigma: expected [min, max] with min",
        ),
        ("data.realesrgan.second.noise.gaussian_sigma=[5]", "data.realesrgan.second.noise.gaussian_sigma"),
        ("data.realesrgan.first.jpeg_quality=[95, 30]", "data.realesrgan.first.jpeg_quality"),
        ("data.realesrgan.second.jpeg_quality=[0, 95]", "data.realesrgan.second.jpeg_quality: expected a range within"),
        ("data.realesrgan.second.blur_prob=1.5", "data.realesrgan.second.blur_prob: expected a probability in [0, 1]"),
        ("data.realesrgan.final.sinc_prob=-0.1", "data.realesrgan.final.sinc_prob"),
        ("data.realesrgan.first.noise.gray_prob=2", "data.realesrgan.first.noise.gray_prob"),
        ("data.realesrgan.first.resize.up=0.5", "data.realesrgan.first.resize: expected probabilities up, down, keep"),
        ("data.realesrgan.second.resize.keep=-0.1", "data.realesrgan.second.resize.keep"),
        ("data.realesrgan.second.blur.kernels.iso=0.9", "data.realesrgan.second.blur.kernels: expected probabilities"),
        ("data.realesrgan.first.resize.range=[1.2, 1.5]", "data.realesrgan.first.resize.range"),
        (
            "data.realesrgan.first.blur.kernel_sizes=[8]",
            "data.realesrgan.first.blur.kernel_sizes: expected one or more odd",
        ),
        ("data.realesrgan.final.modes=[]", "data.realesrgan.final.modes"),
        ("data.realesrgan.final.modes=[nearest]", "data.realesrgan.final.modes[0]: expected one of area"),
        ("data.realesrgan.first.blurr.sigma=[1, 2]", "unknown key data.realesrgan.first.blurr"),
    ],
)
def test_wrong_degradation_settings_are_refused_naming_the_key(setting, culprit):
    with pytest.raises(SrganError) as caught:
        load_config("realesrgan_demo", [setting])
    assert culprit in str(caught.value)


def test_degradation_settings_with_bicubic_are_refused_as_another_archs_keys_are(tmp_path):
    with pytest.raises(
        SrganError, match=r"data\.realesrgan: applies to data\.degradation realesrgan only, not bicubic"
    ):
        load_config("demo", ["data.realesrgan.final.sinc_prob=0.5"])
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"data": {"realesrgan": {"final": {"sinc_prob": 0.5}}}}))
    with pytest.raises(SrganError, match=r"mine\.yaml: data\.realesrgan: applies to"):
        load_config(str(path))
    # --set data.degradation=bicubic on a realesrgan preset: its settings became moot, not a mistake
    config = load_config("realesrgan_demo", ["data.degradation=bicubic"])
    assert config.data.degradation == "bicubic" and "realesrgan" not in config_to_dict(config)["data"]


@pytest.mark.parametrize("name", ["realesrnet_x4", "realesrgan_x4", "realesrgan_demo"])
def test_the_realesrgan_presets_spell_out_every_key_and_load_back(name):
    from importlib import resources

    raw = yaml.safe_load((resources.files("srgan.configs") / f"{name}.yaml").read_text())

    def keys(d, prefix=""):
        out = set()
        for k, v in d.items():
            out |= keys(v, f"{prefix}{k}.") if isinstance(v, dict) and k not in ("kernels", "layers") else {prefix + k}
        return out

    config = load_config(name)
    assert keys(raw) == keys(config_to_dict(config))
    assert config_from_dict(config_to_dict(config)) == config
    if name != "realesrgan_demo":  # its ranges are narrowed: the next test
        assert config.data.realesrgan == RealEsrganDegradation()  # Real-ESRGAN's values, the schema's defaults


def test_realesrgan_demo_degrades_as_photos_are_one_defect_each(one_thread):
    """The preset's pipeline on real photos: a Gaussian blur at the HR size,
    the downscale, colour noise at the LR size, one JPEG, each once. The
    draws of blur_prob, the noise's sigma and the JPEG qualities are made
    whatever their values, so the preset with those changed degrades a crop
    with the same draws otherwise: with its blur, noise and JPEG off, its LR
    is the plain downscale's formula (nothing else happens); each defect
    turned back on alone shows as the preset says."""
    demo = load_config("realesrgan_demo").data.realesrgan
    low, high = RealEsrganDegradation().first.blur.sigma
    assert low <= demo.first.blur.sigma[0] < demo.first.blur.sigma[1] <= high  # its blur within Real-ESRGAN's range
    preset = {"blur": True, "noise": demo.second.noise.gaussian_sigma, "jpeg": demo.second.jpeg_quality}

    def degraded(hr, seed, blur=False, noise=(0.0, 0.0), jpeg=(100.0, 100.0), first_jpeg=(100.0, 100.0)):
        settings = copy.deepcopy(demo)
        settings.first.blur_prob = settings.first.blur_prob if blur else 0.0
        settings.second.noise.gaussian_sigma = list(noise)
        settings.second.jpeg_quality, settings.first.jpeg_quality = list(jpeg), list(first_jpeg)
        return D.degrade(hr, 4, settings, np.random.default_rng(seed))

    def chain(hr, mode, final_mode, quality):  # no blur, the HR size then the LR size, JPEG 100 then at `quality`
        return reference_chain(
            hr, 4, (None, "area", 100), (None, mode, quality), final_mode, None, False, ((64, 64), (16, 16))
        )

    def high_frequency(image):
        return float((image[:, 1:] - image[:, :-1]).pow(2).sum() + (image[:, :, 1:] - image[:, :, :-1]).pow(2).sum())

    luma = torch.tensor([0.299, 0.587, 0.114])[:, None, None]  # JPEG's Y: 4:2:0 averages the chroma, not it
    crops = {"astronaut": (100, 150), "coffee": (50, 200), "chelsea": (60, 150)}
    noises = []
    for name, at in crops.items():
        hr = photo(64, name, at)
        for seed in range(2):
            # all three off: the downscale alone, in one of the preset's modes: no other blur, noise, resize or JPEG
            clean = degraded(hr, seed)
            modes = [
                (mode, final)
                for mode in demo.second.resize.modes
                for final in demo.final.modes
                if torch.equal(clean, chain(hr, mode, final, 100))
            ]
            assert modes, (name, seed)
            # the blur: once (the preset's probability 1), and it smooths
            blurred = degraded(hr, seed, blur=True)
            assert not torch.equal(blurred, clean) and high_frequency(blurred) < high_frequency(clean), (name, seed)
            # the noise: at sigma 12, pooled below; the preset's own, there and at most that
            noise = degraded(hr, seed, noise=(12.0, 12.0)) - clean
            noises.append(noise.flatten(1))
            own = degraded(hr, seed, noise=preset["noise"]) - clean
            assert 0 < float((own * luma).sum(0).std()) < 1.2 * float((noise * luma).sum(0).std()), (name, seed)
            # one JPEG, at the LR size, at a quality of the preset's range; the HR size's, at 95-100, below a level
            jpeg = degraded(hr, seed, jpeg=preset["jpeg"])
            qualities = range(int(preset["jpeg"][0]), int(preset["jpeg"][1]) + 1)
            assert any(torch.equal(jpeg, chain(hr, *modes[0], quality)) for quality in qualities), (name, seed)
            first = degraded(hr, seed, first_jpeg=demo.first.jpeg_quality)
            assert float((first - clean).abs().mean()) * 255 < 1.0, (name, seed)
            # and all together: each defect shows on the preset's LR
            everything = degraded(hr, seed, **preset, first_jpeg=demo.first.jpeg_quality)
            assert not any(torch.equal(everything, other) for other in (clean, blurred, jpeg, first))
    # the noise's luma has sigma 12 x |luma| at the LR size (at the HR size, the downscale by 4 would leave a
    # quarter); in colour, one field a channel: JPEG's 4:2:0 averages their differences, leaving a correlation
    # of 0.7-0.85 between channels (0.99 for gray noise)
    noise = torch.cat(noises, dim=1)
    correlation = np.corrcoef(noise.numpy())
    assert correlation[np.triu_indices(3, 1)].max() < 0.9, correlation
    sigma = float((noise * luma[:, 0]).sum(0).std()) * 255
    assert abs(sigma / (12 * float(luma.norm())) - 1) < 0.08, sigma


def test_realesrgan_presets_follow_real_esrgans_options():
    net, gan = load_config("realesrnet_x4"), load_config("realesrgan_x4")
    assert (net.model.arch, net.model.blocks, net.model.channels, net.train.lr_g) == ("rrdb", 23, 64, 2e-4)
    assert (net.data.batch_size, net.data.crop_size, net.loss.image, net.loss.weights.adversarial) == (12, 256, "l1", 0)
    assert gan.loss.perceptual.layers == {"conv1_2": 0.1, "conv2_2": 0.1, "conv3_4": 1, "conv4_4": 1, "conv5_4": 1}
    assert (gan.loss.weights.adversarial, gan.gan.discriminator, gan.train.ema_decay, gan.train.lr_g) == (
        0.1,
        "unet",
        0.999,
        1e-4,
    )


def test_a_refusal_on_the_command_line_is_one_line_and_exit_2(srgan):
    result = srgan("config", "show", "realesrgan_demo", "--set", "data.realesrgan.first.noise.gaussian_prob=3")
    assert_refused(result, "data.realesrgan.first.noise.gaussian_prob")


# ---------------------------------------------------------------- the pipeline


def photo(side: int = 64, name: str = "astronaut", at: tuple[int, int] = (100, 150)) -> torch.Tensor:
    """A real photo's crop, 3 x side x side in [0, 1], its top left corner at `at`."""
    image = skimage_photo(name)[at[0] : at[0] + side, at[1] : at[1] + side]
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255


@pytest.mark.parametrize("scale", [2, 4])
def test_the_lr_is_the_gt_size_over_scale_on_the_8_bit_grid(scale):
    hr = photo(64)
    settings = RealEsrganDegradation()
    outputs = [D.degrade(hr, scale, settings, np.random.default_rng(seed)) for seed in range(24)]
    for lr in outputs:
        assert lr.shape == (3, 64 // scale, 64 // scale) and lr.dtype == torch.float32
        assert lr.min() >= 0 and lr.max() <= 1
        assert torch.equal(lr * 255, (lr * 255).round())
    # it degrades: the LR differs from a bicubic one, and from seed to seed
    bicubic = F.interpolate(hr[None], scale_factor=1 / scale, mode="bicubic", antialias=True)[0]
    assert all((lr - bicubic).abs().mean() > 0.005 for lr in outputs)
    assert len({lr.numpy().tobytes() for lr in outputs}) == len(outputs)


def test_every_kernel_sums_to_1_and_is_symmetric_under_a_half_turn():
    kernels = [
        D.gaussian_kernel(21, 3.0, 3.0, 0.0),
        D.gaussian_kernel(15, 0.5, 2.5, 0.7),
        D.generalized_gaussian_kernel(11, 1.0, 2.0, -1.0, 0.5),
        D.plateau_kernel(9, 2.0, 1.0, 2.0, 1.5),
        D.sinc_kernel(7, math.pi / 3),
        D.sinc_kernel(21, math.pi / 5),
    ]
    blur = BlurConfig(sinc_prob=0.3)
    kernels += [D.random_kernel(blur, np.random.default_rng(seed)) for seed in range(40)]
    for kernel in kernels:
        assert kernel.shape[0] == kernel.shape[1] and kernel.shape[0] % 2 == 1
        assert abs(kernel.sum() - 1) < 1e-9
        np.testing.assert_allclose(kernel, kernel[::-1, ::-1], atol=1e-12)  # blur() relies on it
    # a wider sigma spreads the weight: the centre tap falls
    assert D.gaussian_kernel(21, 3.0, 3.0, 0)[10, 10] < D.gaussian_kernel(21, 1.0, 1.0, 0)[10, 10] / 5
    # the sinc rings: negative taps, which no Gaussian has
    assert D.sinc_kernel(21, math.pi / 3).min() < 0 and D.gaussian_kernel(21, 2, 2, 0).min() > 0


def test_the_fft_blur_is_the_convolution():
    image = photo(40)
    for kernel in (D.gaussian_kernel(21, 2.0, 0.7, 0.4), D.sinc_kernel(7, 1.5), D.plateau_kernel(13, 1, 2, 1, 1.5)):
        pad = kernel.shape[0] // 2
        padded = F.pad(image[None], (pad,) * 4, mode="reflect")[0, :, None]
        direct = F.conv2d(padded, torch.from_numpy(kernel.astype(np.float32))[None, None])[:, 0]
        assert (D.blur(image, kernel) - direct).abs().max() < 1e-5
    delta = np.zeros((5, 5))
    delta[2, 2] = 1
    assert (D.blur(image, delta) - image).abs().max() < 1e-6
    # an image smaller than the kernel's half (the second stage of a small crop): replicated borders
    assert D.blur(image[:, :4, :4], D.gaussian_kernel(21, 2, 2, 0)).shape == (3, 4, 4)


def blockiness(image: torch.Tensor) -> float:
    """Mean jump across the 8-px JPEG block borders over the mean jump inside blocks."""
    jumps = (image[:, :, 1:] - image[:, :, :-1]).abs().mean(dim=(0, 1))  # per column boundary
    borders = jumps[7::8]
    inside = torch.cat([jumps[k::8] for k in range(7)])
    return float(borders.mean() / inside.mean())


def test_jpeg_at_quality_10_leaves_blocks_that_none_and_95_do_not():
    image = photo(128)
    assert blockiness(image) < 1.2
    assert blockiness(D.jpeg(image, 95)) < 1.2
    assert blockiness(D.jpeg(image, 10)) > 1.5
    assert (D.jpeg(image, 10) - image).abs().mean() > 2 * (D.jpeg(image, 95) - image).abs().mean()


def test_noise_has_the_configured_strength_and_gray_noise_is_one_field():
    gray_card = torch.full((3, 128, 128), 0.5)
    gaussian = NoiseConfig(gaussian_prob=1.0, gaussian_sigma=[20.0, 20.0], gray_prob=0.0)
    noisy = D.add_noise(gray_card, gaussian, np.random.default_rng(0))
    assert abs(float((noisy - gray_card).std()) * 255 - 20) < 1.0
    gray = NoiseConfig(gaussian_prob=1.0, gaussian_sigma=[20.0, 20.0], gray_prob=1.0)
    noisy = D.add_noise(gray_card, gray, np.random.default_rng(0))
    assert torch.equal(noisy[0], noisy[1]) and torch.equal(noisy[1], noisy[2])
    poisson = NoiseConfig(gaussian_prob=0.0, poisson_scale=[1.0, 1.0], gray_prob=0.0)
    shot = D.add_noise(photo(128), poisson, np.random.default_rng(0)) - photo(128)
    assert abs(float(shot.mean())) < 0.01 and float(shot.std()) > 0.01


def test_fast_lengths_have_small_prime_factors_only():
    assert [D._fast_length(n) for n in (276, 277, 64, 97, 121)] == [288, 288, 64, 100, 125]


# ---------------------------------------------------------------- the references
# Each stage against a formula written here (torch's ops, Pillow, scipy), its
# draws pinned by its settings: one kernel size and sigma, the size kept,
# one mode, a quality, probabilities 0 or 1.


@pytest.fixture
def one_thread():
    """The steps called one by one run on one thread, as degrade() runs them:
    small ops on two busy threads measured 20x slower here."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def offsets(size: int) -> tuple[np.ndarray, np.ndarray]:
    """x (the column) and y (the row, downwards) of a size x size kernel's taps, from its centre."""
    half = size // 2
    y, x = np.mgrid[-half : half + 1, -half : half + 1].astype(np.float64)
    return x, y


def covariance(sigma_x: float, sigma_y: float, theta: float) -> np.ndarray:
    """R diag(sigma_x^2, sigma_y^2) R^T, R the rotation by theta (Real-ESRGAN's sigma_matrix2)."""
    rotation = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    return rotation @ np.diag([sigma_x**2, sigma_y**2]) @ rotation.T


def mahalanobis(size: int, cov: np.ndarray) -> np.ndarray:
    """p^T cov^-1 p at every tap p = (x, y)."""
    x, y = offsets(size)
    p = np.stack([x, y], axis=-1)
    return np.einsum("...i,ij,...j->...", p, np.linalg.inv(cov), p)


def normalized(kernel: np.ndarray) -> np.ndarray:
    return kernel / kernel.sum()


def conv(image: torch.Tensor, kernel: np.ndarray) -> torch.Tensor:
    """Each channel convolved with `kernel` (symmetric: correlation is convolution), borders reflected."""
    pad = kernel.shape[0] // 2
    padded = F.pad(image[None], (pad,) * 4, mode="reflect")[0, :, None]
    return F.conv2d(padded, torch.from_numpy(kernel).float()[None, None])[:, 0]


def interpolate(image: torch.Tensor, size, mode: str) -> torch.Tensor:
    corners = {} if mode == "area" else {"align_corners": False}
    return F.interpolate(image[None], size=tuple(size), mode=mode, **corners)[0]


def pillow_jpeg(image: torch.Tensor, quality: int) -> torch.Tensor:
    """Encoded at `quality` and decoded by Pillow, from the 8-bit image."""
    buffer = io.BytesIO()
    pixels = (image * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    with Image.open(buffer) as decoded:
        return torch.from_numpy(np.array(decoded.convert("RGB"))).permute(2, 0, 1).float() / 255


def iso_gaussian(size: int, sigma: float) -> np.ndarray:
    x, y = offsets(size)
    return normalized(np.exp(-(x**2 + y**2) / (2 * sigma**2)))


def circular_low_pass(size: int, cutoff: float) -> np.ndarray:
    """The ideal low-pass of `cutoff` radians in 2D: cutoff J1(cutoff r) / (2 pi r), its limit
    cutoff^2 / (4 pi) at r = 0 (J1(t) / t -> 1/2), cut to size and normalized."""
    from scipy.special import j1

    x, y = offsets(size)
    r = np.hypot(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        kernel = np.where(r > 0, cutoff * j1(cutoff * r) / (2 * math.pi * r), cutoff**2 / (4 * math.pi))
    return normalized(kernel)


@pytest.mark.parametrize("sigma_x, sigma_y, theta", [(2.0, 4.0, 0.5), (1.0, 3.0, -2.0), (3.5, 1.2, 2.9), (1.5, 1.5, 0)])
def test_a_rotated_anisotropic_gaussians_second_moments_are_its_covariance(sigma_x, sigma_y, theta):
    kernel = D.gaussian_kernel(41, sigma_x, sigma_y, theta)  # 5 sigmas a side: the tails are below 1e-5
    x, y = offsets(41)
    assert abs((kernel * x).sum()) < 1e-12 and abs((kernel * y).sum()) < 1e-12
    moments = np.array(
        [[(kernel * x * x).sum(), (kernel * x * y).sum()], [(kernel * y * x).sum(), (kernel * y * y).sum()]]
    )
    np.testing.assert_allclose(moments, covariance(sigma_x, sigma_y, theta), atol=1e-4)
    # and tap for tap, the density of that covariance
    np.testing.assert_allclose(
        kernel, normalized(np.exp(-mahalanobis(41, covariance(sigma_x, sigma_y, theta)) / 2)), rtol=1e-9
    )


def test_generalized_and_plateau_kernels_are_their_closed_forms():
    """exp(-q^beta / 2) and 1 / (1 + q^beta), q = p^T S^-1 p (Real-ESRGAN's
    bivariate_generalized_Gaussian and bivariate_plateau); an isotropic
    generalized Gaussian's variance a side, sigma^2 2^(1/beta) G(2/beta) / (2 G(1/beta))."""
    from scipy.special import gamma

    q = mahalanobis(15, covariance(1.5, 2.5, 0.8))
    for beta in (0.6, 1.7, 3.0):
        np.testing.assert_allclose(
            D.generalized_gaussian_kernel(15, 1.5, 2.5, 0.8, beta), normalized(np.exp(-(q**beta) / 2)), rtol=1e-9
        )
        np.testing.assert_allclose(D.plateau_kernel(15, 1.5, 2.5, 0.8, beta), normalized(1 / (1 + q**beta)), rtol=1e-9)
    np.testing.assert_allclose(
        D.generalized_gaussian_kernel(15, 1.5, 2.5, 0.8, 1.0), D.gaussian_kernel(15, 1.5, 2.5, 0.8)
    )
    x, _ = offsets(41)
    for beta in (0.75, 2.0):  # a cusp (beta < 1) and a flat top; sigma 2.5: discretisation below 1e-3
        variance = (D.generalized_gaussian_kernel(41, 2.5, 2.5, 0.0, beta) * x**2).sum()
        expected = 2.5**2 * 2 ** (1 / beta) * gamma(2 / beta) / (2 * gamma(1 / beta))
        assert abs(variance / expected - 1) < 2e-3, (beta, variance, expected)


@pytest.mark.parametrize("size, cutoff", [(7, math.pi / 3), (13, math.pi / 2), (21, math.pi / 5), (9, math.pi)])
def test_the_sinc_kernel_is_the_circular_low_pass_of_bessels_j1(size, cutoff):
    # torch's bessel_j1 (the pipeline's) is within 5e-7 of scipy's on [0, 40]; the taps are about 1e-2
    np.testing.assert_allclose(D.sinc_kernel(size, cutoff), circular_low_pass(size, cutoff), rtol=0, atol=1e-6)


def fixed_stage(
    blur_sigma=None, size=9, mode="area", quality=100, up=1.0, noise_sigma=0.0, gray=0.0
) -> DegradationStage:
    """A stage with nothing left to draw but its noise field and its factor up:
    an isotropic Gaussian of `size` and `blur_sigma` (None: no blur), a resize
    up by a factor in [1, up] (1: the size kept), one mode, Gaussian noise of
    noise_sigma (0: its clip alone), one JPEG quality."""
    return DegradationStage(
        blur_prob=0.0 if blur_sigma is None else 1.0,
        blur=BlurConfig(
            kernel_sizes=[size], kernels=KernelMix(1, 0, 0, 0, 0, 0), sigma=[blur_sigma or 1.0] * 2, sinc_prob=0
        ),
        resize=ResizeConfig(up=float(up > 1), down=0, keep=float(up == 1), range=[0.5, up], modes=[mode]),
        noise=NoiseConfig(gaussian_prob=1, gaussian_sigma=[noise_sigma] * 2, gray_prob=gray),
        jpeg_quality=[quality] * 2,
    )


@pytest.mark.parametrize("way, bounds", [("up", (1.0, 1.5)), ("down", (0.5, 1.0)), ("keep", (1.0, 1.0))])
def test_a_stage_blurs_then_resizes_by_one_factor_of_the_size_it_is_given(way, bounds, one_thread):
    """Blur, then a resize to int(size_of_one x f) a side, one f in the way's
    range for both sides, whatever the input's own size."""
    image = photo(48)[:, :, :40]
    size_of_one = (20, 16)
    stage = fixed_stage(blur_sigma=1.2, size=7, mode="bilinear")
    stage.resize = ResizeConfig(
        **{w: float(w == way) for w in ("up", "down", "keep")}, range=[0.5, 1.5], modes=["bilinear"]
    )
    sizes = set()
    for seed in range(10):
        out = D.degradation_stage(image, stage, np.random.default_rng(seed), size_of_one)
        h, w = out.shape[-2:]
        # the factors f giving h = int(20 f) and w = int(16 f) meet the way's range
        low, high = max(bounds[0], h / 20, w / 16), min(bounds[1], (h + 1) / 20, (w + 1) / 16)
        assert low <= high, (way, h, w)
        assert (out - interpolate(conv(image, iso_gaussian(7, 1.2)), (h, w), "bilinear").clamp(0, 1)).abs().max() < 1e-5
        sizes.add((h, w))
    assert len(sizes) >= 4 if way != "keep" else sizes == {size_of_one}
    stage.blur_prob = 0.0
    out = D.degradation_stage(image, stage, np.random.default_rng(0), size_of_one)
    assert (out - interpolate(image, out.shape[-2:], "bilinear").clamp(0, 1)).abs().max() < 1e-6


def reference_chain(hr, scale, first, second, final_mode, sinc, sinc_first, sizes) -> torch.Tensor:
    """Real-ESRGAN's feed_data with every draw fixed: first and second are
    (kernel or None, mode, JPEG quality), `sizes` the two stages' sizes,
    their noise of sigma 0 a clip to [0, 1]."""
    (kernel1, mode1, quality1), (kernel2, mode2, quality2) = first, second
    lr_size = (hr.shape[1] // scale, hr.shape[2] // scale)
    out = hr if kernel1 is None else conv(hr, kernel1)
    out = pillow_jpeg(interpolate(out, sizes[0], mode1).clamp(0, 1), quality1)
    out = out if kernel2 is None else conv(out, kernel2)
    out = interpolate(out, sizes[1], mode2).clamp(0, 1)

    def resize_and_sinc(image):
        image = interpolate(image, lr_size, final_mode)
        return image if sinc is None else conv(image, sinc)

    out = pillow_jpeg(resize_and_sinc(out), quality2) if sinc_first else resize_and_sinc(pillow_jpeg(out, quality2))
    return (out * 255).round().clamp(0, 255) / 255


@pytest.mark.parametrize(
    "first, second, final, sinc, sinc_first, scale",
    [
        # the first stage's blur, at the HR size
        ((1.5, 9, "area", 100), (None, 7, "area", 100), "area", None, False, 4),
        # the JPEG of each stage: the first's at the HR size, the second's (the final's) at the LR size
        ((None, 9, "bicubic", 30), (None, 7, "area", 60), "area", None, False, 2),
        # the second stage: its blur at the LR size, its own resize mode, then the final's
        ((None, 9, "bicubic", 100), (1.0, 7, "bilinear", 80), "bicubic", None, False, 4),
        # the final sinc, after the JPEG and before it
        ((None, 9, "area", 100), (None, 7, "area", 50), "bilinear", 0.5, False, 4),
        ((None, 9, "area", 90), (None, 9, "bicubic", 50), "area", 0.4, True, 4),
        # a factor up at the first stage, of the HR size; at the second, of the LR size; the final resize back
        ((None, 9, "bilinear", 70, 1.12), (None, 7, "area", 100), "area", None, False, 4),
        ((1.2, 7, "area", 100), (0.8, 7, "bicubic", 60, 1.3), "bilinear", None, True, 4),
    ],
    ids=["blur", "jpeg", "second-stage", "sinc-after-jpeg", "sinc-before-jpeg", "first-resize", "second-resize"],
)
def test_each_stage_alone_is_its_formula(first, second, final, sinc, sinc_first, scale, one_thread):
    """The pipeline's LR against the chain of formulas, with its draws pinned
    by the settings. Where a stage resizes by a drawn factor, the LR must be
    the chain at one of the sizes that factor's range gives (int(side x f), f
    in [1, up]), and the draws must reach sizes other than 1's. On one thread,
    as the pipeline: torch's bilinear upscale differs in its last bit on two,
    which a JPEG can turn into levels."""
    hr = photo(64)
    side, lr_side = 64, 64 // scale
    (sigma1, size1, mode1, q1, *up1), (sigma2, size2, mode2, q2, *up2) = first, second
    up1, up2 = (up1 or [1.0])[0], (up2 or [1.0])[0]
    settings = RealEsrganDegradation(
        first=fixed_stage(sigma1, size1, mode1, q1, up1),
        second=fixed_stage(sigma2, size2, mode2, q2, up2),
        final=FinalStep(
            sinc_prob=float(sinc is not None),
            sinc_cutoff=[sinc or 1.0] * 2,
            sinc_first_prob=float(sinc_first),
            modes=[final],
        ),
    )
    sizes1 = range(side, int(side * up1) + 1)  # the sides int(side x f) a factor in [1, up] gives
    sizes2 = range(lr_side, int(lr_side * up2) + 1)
    met = set()
    for seed in range(4 if up1 > 1 or up2 > 1 else 2):
        lr = D.degrade(hr, scale, settings, np.random.default_rng(seed))
        assert lr.shape == (3, lr_side, lr_side)
        matches = set()
        for n1 in sizes1:
            for n2 in sizes2:
                expected = reference_chain(
                    hr,
                    scale,
                    (None if sigma1 is None else iso_gaussian(size1, sigma1), mode1, q1),
                    (None if sigma2 is None else iso_gaussian(size2, sigma2), mode2, q2),
                    final,
                    None
                    if sinc is None
                    else circular_low_pass(size2, sinc * math.pi),  # its size: the second's kernel sizes
                    sinc_first,
                    ((n1, n1), (n2, n2)),
                )
                # the FFT blur is the convolution within 1e-5, which may move a JPEG input across an 8-bit rounding
                if (lr - expected).abs().max() <= 1.01 / 255 and (lr - expected).abs().mean() < 0.02 / 255:
                    matches.add((n1, n2))
        assert matches, (seed, first, second)
        met |= matches
    assert any(n1 > side for n1, _ in met) == (up1 > 1) and any(n2 > lr_side for _, n2 in met) == (up2 > 1), met


def test_each_stages_noise_has_its_sigma_at_the_size_it_is_applied():
    """Gaussian noise of sigma s at the HR size (the first stage), seen on the
    LR after the area downscales by `scale` (the mean of scale^2 independent
    values): s / scale; at the LR size (the second stage's): s. Gray noise on
    a gray card: no chroma for JPEG 100's 4:2:0 to average."""
    card = torch.full((3, 128, 128), 128 / 255)
    for stage, expected in (("first", 20 / 4), ("second", 20.0)):
        settings = RealEsrganDegradation(
            first=fixed_stage(noise_sigma=20.0 if stage == "first" else 0.0, gray=1.0),
            second=fixed_stage(noise_sigma=20.0 if stage == "second" else 0.0, gray=1.0),
            final=FinalStep(sinc_prob=0, modes=["area"]),
        )
        noise = torch.stack(
            [D.degrade(card, 4, settings, np.random.default_rng(seed)) - card[:, :32, :32] for seed in range(4)]
        )
        assert noise.shape == (4, 3, 32, 32)
        assert abs(float(noise.std()) * 255 / expected - 1) < 0.05, (stage, float(noise.std()) * 255)
        assert abs(float(noise.mean())) * 255 < 0.05 * expected


def test_poisson_noise_variance_is_scale_squared_times_intensity_over_the_levels(one_thread):
    """Real-ESRGAN's shot noise (BasicSR's generate_poisson_noise): counts ~
    Poisson(I L), L the image's distinct 8-bit values rounded up to a power
    of 2, noise (counts / L - I) x poisson_scale: mean 0, variance
    scale^2 I / L, a standard deviation proportional to the scale."""
    ramp = (torch.arange(256.0) / 255)[None, :, None].expand(3, 256, 32).contiguous()  # every level: L = 256
    rows = slice(26, 154)  # I in [0.1, 0.6]: no clipping
    three = torch.tensor([51.0, 102.0, 153.0]).div(255).repeat_interleave(40)[None, :, None].expand(3, 120, 32)
    for image, levels, region, scales in (
        (ramp, 256, rows, (0.25, 1.0, 1.5)),
        (three.contiguous(), 4, slice(None), (0.1, 0.2)),
    ):
        for scale in scales:
            noise = NoiseConfig(gaussian_prob=0.0, poisson_scale=[scale, scale], gray_prob=0.0)
            shot = (D.add_noise(image, noise, np.random.default_rng(1)) - image)[:, region]
            intensity = image[:, region]
            variance = float(shot.pow(2).sum() / intensity.sum())  # E[noise^2] / E[I]
            assert abs(variance / (scale**2 / levels) - 1) < 0.05, (levels, scale, variance * levels / scale**2)
            assert abs(float(shot.mean())) < 0.05 * scale * math.sqrt(float(intensity.mean()) / levels)
    # gray: one field from the luma (here the ramp itself), the same on the three channels
    gray = NoiseConfig(gaussian_prob=0.0, poisson_scale=[1.0, 1.0], gray_prob=1.0)
    shot = (D.add_noise(ramp, gray, np.random.default_rng(1)) - ramp)[:, rows]
    assert torch.equal(shot[0], shot[1]) and torch.equal(shot[1], shot[2])
    assert abs(float(shot[0].pow(2).sum() / ramp[0, rows].sum()) * 256 - 1) < 0.08


# ---------------------------------------------------------------- determinism


def test_a_seed_fixes_every_degraded_batch_whatever_the_workers(photo_dir):
    images = open_images(str(photo_dir), "data.train", 64)
    dataset = TrainPairs(images, 64, 4, 4, seed=5, degradation=RealEsrganDegradation())
    batches = []
    for workers in (0, 2):
        sampler = EpochSampler(len(dataset), 4, seed=5)
        sampler.set_epoch(1)
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=workers)
        batches.append(list(loader))
    assert len(batches[0]) == 3
    for (lr_a, hr_a), (lr_b, hr_b) in zip(*batches, strict=True):
        assert torch.equal(lr_a, lr_b) and torch.equal(hr_a, hr_b)
    # the crops are those of bicubic training (the degradation draws after them)
    plain = TrainPairs(images, 64, 4, 4, seed=5)
    assert torch.equal(plain[(1, 3)][1], dataset[(1, 3)][1])
    assert not torch.equal(TrainPairs(images, 64, 4, 4, 6, RealEsrganDegradation())[(1, 3)][0], dataset[(1, 3)][0])


def test_a_resumed_degraded_run_equals_the_run_never_stopped(photo_dir, tmp_path):
    from srgan.training import train
    from test_reproducibility import assert_same_checkpoints

    def config(run_dir):
        return load_config(
            "realesrgan_demo",
            tiny_overrides(photo_dir, run_dir, "train.max_steps=3", "train.epochs=4"),
        )

    whole = train(config(tmp_path / "whole"))
    part = interrupt_at(config(tmp_path / "part"), 1)  # mid-epoch: epochs of 2 steps
    train(config(part), resume=part)
    assert_same_checkpoints(whole, part)


def test_validation_lr_is_degraded_the_same_at_every_validation(val_dir):
    images = open_images(str(val_dir), "data.val", 20)
    first, second = (ValImages(images, 4, 0, RealEsrganDegradation(), seed=0)[0] for _ in range(2))
    assert torch.equal(first[1], second[1])
    assert not torch.equal(first[1], ValImages(images, 4, 0)[0][1])  # not bicubic's


# ---------------------------------------------------------------- the commands


def test_degrade_writes_a_sheet_of_count_rows_and_refuses_to_overwrite(srgan, photo_dir, tmp_path):
    sheet = tmp_path / "sheet.png"
    args = ["degrade", photo_dir, "-o", sheet, "--config", "realesrgan_demo", "--set", "data.crop_size=32"]
    result = srgan(*args, "--count", "3", "--seed", "4")
    assert result.returncode == 0, result
    with Image.open(sheet) as image:
        assert image.size == (32 + GAP + 32, 3 * 32 + 2 * GAP)
        pixels = np.asarray(image.convert("RGB"))
    # each LR cell is 8x8 LR pixels shown 4x4 each (nearest)
    lr_cell = pixels[:32, :32]
    assert np.array_equal(lr_cell, lr_cell[::4, ::4].repeat(4, axis=0).repeat(4, axis=1))
    before = sheet.read_bytes()
    assert_refused(srgan(*args, "--count", "2"), "sheet.png")
    assert sheet.read_bytes() == before
    assert srgan(*args, "--count", "2", "--force").returncode == 0
    with Image.open(sheet) as image:
        assert image.size == (32 + GAP + 32, 2 * 32 + GAP)
    # one image as SOURCE
    one = tmp_path / "one.png"
    single = srgan("degrade", photo_dir / "astronaut.png", "-o", one, "--config", "realesrgan_demo", "--count", "1")
    assert single.returncode == 0, single
    with Image.open(one) as image:
        assert image.size == (64 + GAP + 64, 64)
    # the default preset's 256 px crops do not fit a 128 px photo: refused, naming it
    assert_refused(srgan("degrade", photo_dir / "astronaut.png", "-o", tmp_path / "two.png"), "astronaut.png")


def test_evaluate_degrade_scores_the_same_lr_on_every_call(srgan, photo_dir, val_dir, tmp_path):
    hr = np.asarray(Image.open(photo_dir / "astronaut.png").convert("RGB"))
    degrade = (RealEsrganDegradation(), 0)
    first, second = model_input(hr, None, 4, degrade, "astronaut"), model_input(hr, None, 4, degrade, "astronaut")
    assert first.shape == (32, 32, 3) and first.dtype == np.uint8
    assert np.array_equal(first, second)
    assert not np.array_equal(first, model_input(hr, None, 4, None, "astronaut"))

    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    scores = []
    for name in ("a.json", "b.json"):
        result = srgan("evaluate", val_dir, "-k", checkpoint, "--degrade", "realesrgan_demo", "--json", tmp_path / name)
        assert result.returncode == 0, result
        assert "LR: realesrgan degradation, seed 0" in result.stdout
        scores.append(json.loads((tmp_path / name).read_text())["images"])
    assert scores[0] == scores[1]
    plain = srgan("evaluate", val_dir, "-k", checkpoint, "--json", tmp_path / "plain.json")
    assert json.loads((tmp_path / "plain.json").read_text())["images"] != scores[0], plain
    assert_refused(srgan("evaluate", val_dir, "-k", checkpoint, "--degrade", "demo"), "--degrade demo")
    compared = srgan(
        "compare", checkpoint, photo_dir / "astronaut.png", "-o", tmp_path / "c.png", "--degrade", "realesrgan_demo"
    )
    assert compared.returncode == 0 and "LR by realesrgan_demo" in compared.stdout, compared


def test_bench_data_reports_degraded_pairs_per_second(srgan, photo_dir):
    result = srgan(
        "bench", "data", "--config", "realesrgan_demo", "--set", f"data.train={photo_dir}",
        "--set", "data.workers=0", "--batches", "2", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result
    figures = json.loads(result.stdout)
    assert figures["degradation"] == "realesrgan" and figures["pairs_per_s"] > 0


def test_any_accepted_setting_degrades_to_the_lr_size_in_range():
    """Whatever the loader accepts (extreme ranges, tiny images, kernels
    larger than the image) the pipeline returns the LR size in [0, 1]."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    unit = st.floats(0, 1)

    def span(low, high):
        return st.tuples(st.floats(low, high), st.floats(low, high)).map(lambda p: sorted(p))

    stage = st.fixed_dictionaries(
        {
            "blur_prob": unit,
            "blur": st.fixed_dictionaries(
                {
                    "kernel_sizes": st.lists(st.sampled_from([3, 5, 21, 41]), min_size=1, max_size=3),
                    "sigma": span(0.01, 100),
                    "betag": span(0.01, 100),
                    "betap": span(0.01, 100),
                    "sinc_prob": unit,
                    "sinc_cutoff": span(0.01, 1),
                }
            ),
            "resize": st.fixed_dictionaries(
                {"range": st.tuples(st.floats(0.01, 1), st.floats(1, 4)).map(list), "modes": st.just(["area"])}
            ),
            "noise": st.fixed_dictionaries(
                {
                    "gaussian_prob": unit,
                    "gaussian_sigma": span(0, 255),
                    "poisson_scale": span(0, 100),
                    "gray_prob": unit,
                }
            ),
            "jpeg_quality": span(1, 100),
        }
    )

    @settings(max_examples=25, deadline=None)
    @given(first=stage, second=stage, sinc_prob=unit, seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([2, 4]))
    def check(first, second, sinc_prob, seed, scale):
        raw = {
            "degradation": "realesrgan",
            "realesrgan": {"first": first, "second": second, "final": {"sinc_prob": sinc_prob}},
        }
        config = config_from_dict({"data": {**raw, "crop_size": 32}, "model": {"scale": scale}})
        lr = D.degrade(photo(32), scale, config.data.realesrgan, np.random.default_rng(seed))
        assert lr.shape == (3, 32 // scale, 32 // scale)
        assert torch.isfinite(lr).all() and lr.min() >= 0 and lr.max() <= 1

    check()
