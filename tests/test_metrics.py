"""PSNR/SSIM agree with scikit-image's on real photos, and evaluate gives
the literature's bicubic figure on Set5."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from conftest import bare_checkpoint, run_cli, skimage_photo
from srgan.metrics.psnr_ssim import psnr_y, rgb8_to_y, ssim_y

SET5 = Path(__file__).parent / "data" / "Set5"


def degraded_pairs():
    """(distorted, reference) uint8 photos: bicubic x4 round trips and noise."""
    for name in ("astronaut", "coffee", "chelsea"):
        hr = skimage_photo(name)
        h, w = hr.shape[0] - hr.shape[0] % 4, hr.shape[1] - hr.shape[1] % 4
        hr = hr[:h, :w]
        lr = Image.fromarray(hr).resize((w // 4, h // 4), Image.BICUBIC)
        yield np.array(lr.resize((w, h), Image.BICUBIC)), hr
        noise = np.random.default_rng(0).normal(0, 8, hr.shape)
        yield np.clip(hr + noise, 0, 255).astype(np.uint8), hr


@pytest.mark.parametrize("pair", list(degraded_pairs()), ids=lambda _: "photo")
def test_psnr_and_ssim_agree_with_scikit_image(pair):
    distorted, reference = pair
    a, b = torch.from_numpy(distorted).permute(2, 0, 1), torch.from_numpy(reference).permute(2, 0, 1)
    border = 4
    ya = rgb8_to_y(a).numpy()[border:-border, border:-border]
    yb = rgb8_to_y(b).numpy()[border:-border, border:-border]
    expected_psnr = peak_signal_noise_ratio(yb, ya, data_range=255)
    expected_ssim = structural_similarity(
        yb, ya, data_range=255, gaussian_weights=True, sigma=1.5, use_sample_covariance=False
    )
    assert psnr_y(a, b, border) == pytest.approx(expected_psnr, abs=0.01)
    assert ssim_y(a, b, border) == pytest.approx(expected_ssim, abs=0.001)


def test_y_channel_is_matlabs_rgb2ycbcr():
    """BT.601 as MATLAB's rgb2ycbcr: Y = 16 + 65.481 R + 128.553 G + 24.966 B
    (R, G, B in [0, 1]). Black, white and grey hold for any weights summing
    to 219; the primaries tell BT.601 from BT.709 (46.559, 156.629, 15.812)
    and RGB from BGR."""
    colours = {  # (R, G, B) in 0..255 -> Y
        "black": ((0, 0, 0), 16.0),
        "white": ((255, 255, 255), 235.0),
        "red": ((255, 0, 0), 16.0 + 65.481),
        "green": ((0, 255, 0), 16.0 + 128.553),
        "blue": ((0, 0, 255), 16.0 + 24.966),
        "mid grey": ((128, 128, 128), 16.0 + 219.0 * 128 / 255),
    }
    # One row of pixels, 3xHxW as the metrics take them: each colour in its own column.
    row = torch.tensor([rgb for rgb, _ in colours.values()], dtype=torch.uint8).T.reshape(3, 1, len(colours))
    y = rgb8_to_y(row)
    assert y.shape == (1, len(colours))
    for (name, (_, want)), got in zip(colours.items(), y[0].tolist(), strict=True):
        assert got == pytest.approx(want, abs=1e-9), name


def tiny_checkpoint(tmp_path: Path) -> Path:
    """A bare generator checkpoint (1 block, 8 channels, x4) to score with."""
    return bare_checkpoint(tmp_path / "g.pt")


def test_evaluate_gives_the_literature_bicubic_on_set5(tmp_path):
    ckpt = tiny_checkpoint(tmp_path)
    out = tmp_path / "scores.json"
    result = run_cli("evaluate", str(SET5), "--checkpoint", str(ckpt), "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "Y channel" in result.stdout and "mean" in result.stdout
    scores = json.loads(out.read_text())
    assert scores["scale"] == 4 and "Y channel" in scores["convention"]
    assert [im["name"] for im in scores["images"]] == ["baby", "bird", "butterfly", "head", "woman"]
    assert round(scores["mean"]["bicubic"]["psnr"], 2) == 28.43
    assert 0 < scores["mean"]["bicubic"]["ssim"] < 1
    assert set(scores["images"][0]) == {"name", "sr", "bicubic", "gain_psnr"}
    assert set(scores["mean"]["sr"]) == {"psnr", "ssim"}
    # The gain column: SR minus bicubic, per image as printed, and the worst one named.
    baby = scores["images"][0]
    assert baby["gain_psnr"] == baby["sr"]["psnr"] - baby["bicubic"]["psnr"]
    row = next(line for line in result.stdout.splitlines() if line.startswith("baby"))
    assert row.split()[-1] == f"{baby['gain_psnr']:+.2f}"
    worst = min(scores["images"], key=lambda im: im["gain_psnr"])
    assert f"worst gain: {worst['name']} {worst['gain_psnr']:+.2f} dB" in result.stdout


def test_evaluate_gives_a_mean_per_folder_as_the_literature_reports_each_set(tmp_path):
    ckpt = tiny_checkpoint(tmp_path)
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.fromarray(skimage_photo("coffee")[:128, :160]).save(photos / "coffee.png")
    Image.fromarray(skimage_photo("chelsea")[:96, :96]).save(photos / "chelsea.png")
    out = tmp_path / "scores.json"
    result = run_cli("evaluate", str(SET5), str(photos), "--checkpoint", str(ckpt), "--json", str(out))
    assert result.returncode == 0, result.stderr
    scores = json.loads(out.read_text())
    assert [(f["name"], f["images"]) for f in scores["folders"]] == [("Set5", 5), ("photos", 2)]
    set5, mine = scores["images"][:5], scores["images"][5:]
    for folder, images in zip(scores["folders"], (set5, mine), strict=True):
        assert folder["bicubic"]["psnr"] == pytest.approx(np.mean([im["bicubic"]["psnr"] for im in images]))
        assert folder["gain_psnr"] == pytest.approx(np.mean([im["gain_psnr"] for im in images]))
    assert round(scores["folders"][0]["bicubic"]["psnr"], 2) == 28.43  # Set5 alone, as in the literature
    assert scores["mean"]["sr"]["psnr"] == pytest.approx(np.mean([im["sr"]["psnr"] for im in scores["images"]]))
    assert "Set5 mean" in result.stdout and "photos mean" in result.stdout
