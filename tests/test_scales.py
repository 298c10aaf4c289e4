"""x1 and x3 end to end: a 2-step run (x3 on paired data, validated on
pairs), then upscale, evaluate and compare with its checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import run_cli, skimage_photo, tiny_overrides
from srgan.configs import load_config
from srgan.data import bicubic_downscale
from srgan.files.errors import SrganError
from srgan.inference.compare import mod_crop
from srgan.metrics.psnr_ssim import shave
from srgan.models import Generator
from srgan.training import train


@pytest.fixture(scope="module")
def x3_pairs(tmp_path_factory):
    """Photos (sides not multiples of 3) and their x3 LR made another way
    than the model's bicubic: a box filter."""
    root = tmp_path_factory.mktemp("x3")
    for name, (top, left) in {"astronaut": (80, 150), "coffee": (40, 190), "chelsea": (50, 140)}.items():
        hr = skimage_photo(name)[top : top + 76, left : left + 67]
        (root / "hr").mkdir(exist_ok=True)
        (root / "lr").mkdir(exist_ok=True)
        Image.fromarray(hr).save(root / "hr" / f"{name}.png")
        lr = Image.fromarray(mod_crop(hr, 3)).resize((67 // 3, 76 // 3), Image.Resampling.BOX)
        lr.save(root / "lr" / f"{name}.jpg", quality=95)
    return root


def check_outputs(run, image, scale: int, tmp_path, *evaluate_args):
    result = run_cli("upscale", image, "--checkpoint", run, "--output", tmp_path / "up")
    assert result.returncode == 0, result
    width, height = Image.open(image).size
    assert Image.open(tmp_path / "up" / f"{image.stem}_x{scale}.png").size == (width * scale, height * scale)
    out = tmp_path / "scores.json"
    result = run_cli("evaluate", image.parent, "-k", run, "--json", out, *evaluate_args)
    assert result.returncode == 0, result
    scores = json.loads(out.read_text())
    assert scores["scale"] == scale and f"{scale} px border shaved" in scores["convention"]
    assert all(np.isfinite(im["sr"]["psnr"]) for im in scores["images"])
    return scores


def test_x3_trains_on_pairs_and_upscales_evaluates_and_compares(x3_pairs, tmp_path):
    hr, lr = x3_pairs / "hr", x3_pairs / "lr"
    overrides = tiny_overrides(
        hr, tmp_path / "run", "model.scale=3", "data.crop_size=30", f"data.train_lr={lr}", "loss.weights.perceptual=0"
    )
    run = train(load_config("demo", [*overrides, f"data.val={hr}", f"data.val_lr={lr}"]))
    assert (run / "samples").is_dir()
    assert Generator(3, 1, 8).receptive_radius > 0
    paired = check_outputs(run, hr / "coffee.png", 3, tmp_path, "--lr", lr)
    plain = check_outputs(run, hr / "coffee.png", 3, tmp_path / "plain")
    # bicubic from the given (box-filtered) LR is not bicubic from PIL's bicubic downscale
    assert paired["mean"]["bicubic"]["psnr"] != plain["mean"]["bicubic"]["psnr"]
    result = run_cli("compare", run, hr / "coffee.png", "--lr", lr, "-o", tmp_path / "cmp.png")
    assert result.returncode == 0, result
    assert Image.open(tmp_path / "cmp.png").size[1] == 75  # 25 LR rows x 3


def test_x1_trains_and_upscales_and_evaluates(photo_dir, tmp_path):
    overrides = tiny_overrides(
        photo_dir, tmp_path / "run", "model.arch=rrdb", "model.scale=1", "model.growth=4", "loss.weights.perceptual=0"
    )
    run = train(load_config("demo", overrides))
    scores = check_outputs(run, photo_dir / "astronaut.png", 1, tmp_path)
    assert "1 px border shaved" in scores["convention"]
    # x1's bicubic "upscale" is the input itself: a perfect score
    assert scores["images"][0]["bicubic"]["psnr"] == float("inf")


def test_x1_shaves_one_pixel_and_x3_three():
    y = torch.arange(100.0).reshape(10, 10)
    assert shave(y, 1).shape == (8, 8) and shave(y, 3).shape == (4, 4)
    assert bicubic_downscale(np.zeros((7, 5, 3), np.uint8), 1).shape == (7, 5, 3)


def test_scales_an_arch_cannot_make_are_refused_with_the_list():
    with pytest.raises(SrganError, match="model.scale: expected 2, 3, 4 or 8 with model.arch srresnet, got 1"):
        load_config("demo", ["model.scale=1"])
    with pytest.raises(SrganError, match="model.scale: expected 1, 2 or 4 with model.arch rrdb, got 3"):
        load_config("demo", ["model.arch=rrdb", "model.scale=3"])
