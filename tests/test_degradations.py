"""data.degradation realesrgan: the config's refusals, the pipeline's
statistics, its determinism (any worker count, resume), `srgan degrade` and
`srgan evaluate --degrade`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from PIL import Image

from conftest import assert_refused, bare_checkpoint, interrupt_at, skimage_photo, tiny_overrides
from srgan.configs import SrganError, config_from_dict, config_to_dict, load_config
from srgan.configs.schema import BlurConfig, NoiseConfig, RealEsrganDegradation
from srgan.data import EpochSampler, TrainPairs, ValImages, open_images
from srgan.data import degradations as D
from srgan.inference.compare import GAP, model_input

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


def test_realesrgan_demo_degrades_as_photos_are_one_defect_each():
    """A Gaussian blur at the HR size, the downscale, colour noise at the LR
    size, one JPEG: Real-ESRGAN's stages with the rest turned off, its blur
    within Real-ESRGAN's range."""
    r, real_esrgan = load_config("realesrgan_demo").data.realesrgan, RealEsrganDegradation()
    assert (r.first.blur_prob, r.second.blur_prob, r.first.blur.sinc_prob, r.final.sinc_prob) == (1, 0, 0, 0)
    assert r.first.blur.kernels.iso + r.first.blur.kernels.aniso == 1
    low, high = real_esrgan.first.blur.sigma
    assert low <= r.first.blur.sigma[0] < r.first.blur.sigma[1] <= high
    assert (r.first.resize.keep, r.second.resize.keep) == (1, 1)  # HR size, then straight to the LR size
    assert r.first.noise.gaussian_sigma == [0, 0] and r.first.jpeg_quality[0] >= 95  # nothing else at the HR size
    assert (r.second.noise.gaussian_prob, r.second.noise.gray_prob) == (1, 0) and r.second.noise.gaussian_sigma[1] > 0
    assert 30 <= r.second.jpeg_quality[0] < r.second.jpeg_quality[1] <= 95


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


def photo(side: int = 64, seed: int = 0) -> torch.Tensor:
    """A real photo's crop, 3 x side x side in [0, 1]."""
    image = skimage_photo("astronaut")[100 : 100 + side, 150 : 150 + side]
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
