"""The colour drift (metrics/colour.py): CIEDE2000 against the published
test pairs of Sharma, Wu and Dalal (2005) and against scikit-image, sRGB ->
CIELAB against scikit-image's rgb2lab, the sign of the a*/b* shifts, and the
paths that report it: validation (validation.csv, best.pt by ciede2000),
`srgan runs`, `srgan evaluate`, and the real-world presets that track it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import skimage.color
import torch
from PIL import Image

from conftest import bare_checkpoint, run_cli, skimage_photo, tiny_overrides

# Table 1 of G. Sharma, W. Wu, E. N. Dalal, "The CIEDE2000 color-difference
# formula: implementation notes, supplementary test data, and mathematical
# observations", Color Res. Appl. 30(1):21-30, 2005: L1 a1 b1, L2 a2 b2, dE00.
SHARMA_2005 = [
    (50.0000, 2.6772, -79.7751, 50.0000, 0.0000, -82.7485, 2.0425),
    (50.0000, 3.1571, -77.2803, 50.0000, 0.0000, -82.7485, 2.8615),
    (50.0000, 2.8361, -74.0200, 50.0000, 0.0000, -82.7485, 3.4412),
    (50.0000, -1.3802, -84.2814, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -1.1848, -84.8006, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -0.9009, -85.5211, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, 0.0000, 0.0000, 50.0000, -1.0000, 2.0000, 2.3669),
    (50.0000, -1.0000, 2.0000, 50.0000, 0.0000, 0.0000, 2.3669),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0009, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0010, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0011, 7.2195),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0012, 7.2195),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0009, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0010, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0011, -2.4900, 4.7461),
    (50.0000, 2.5000, 0.0000, 50.0000, 0.0000, -2.5000, 4.3065),
    (50.0000, 2.5000, 0.0000, 73.0000, 25.0000, -18.0000, 27.1492),
    (50.0000, 2.5000, 0.0000, 61.0000, -5.0000, 29.0000, 22.8977),
    (50.0000, 2.5000, 0.0000, 56.0000, -27.0000, -3.0000, 31.9030),
    (50.0000, 2.5000, 0.0000, 58.0000, 24.0000, 15.0000, 19.4535),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.1736, 0.5854, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2972, 0.0000, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 1.8634, 0.5757, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2592, 0.3350, 1.0000),
    (60.2574, -34.0099, 36.2677, 60.4626, -34.1751, 39.4387, 1.2644),
    (63.0109, -31.0961, -5.8663, 62.8187, -29.7946, -4.0864, 1.2630),
    (61.2901, 3.7196, -5.3901, 61.4292, 2.2480, -4.9620, 1.8731),
    (35.0831, -44.1164, 3.7933, 35.0232, -40.0716, 1.5901, 1.8645),
    (22.7233, 20.0904, -46.6940, 23.0331, 14.9730, -42.5619, 2.0373),
    (36.4612, 47.8580, 18.3852, 36.2715, 50.5065, 21.2231, 1.4146),
    (90.8027, -2.0831, 1.4410, 91.1528, -1.6435, 0.0447, 1.4441),
    (90.9257, -0.5406, -0.9208, 88.6381, -0.8985, -0.7239, 1.5381),
    (6.7747, -0.2908, -2.4247, 5.8714, -0.0985, -2.2286, 0.6377),
    (2.0776, 0.0795, -1.1350, 0.9033, -0.0636, -0.5514, 0.9082),
]


def as_pairs(rows) -> tuple[torch.Tensor, torch.Tensor]:
    """N pairs -> two Nx3x1x1 Lab tensors (a batch of 1x1 images)."""
    table = torch.tensor(rows, dtype=torch.float64)
    return table[:, 0:3, None, None], table[:, 3:6, None, None]


def test_ciede2000_gives_sharma_2005s_table_1_to_four_decimals_both_ways():
    from srgan.metrics import ciede2000

    lab1, lab2 = as_pairs(SHARMA_2005)
    expected = torch.tensor([row[6] for row in SHARMA_2005], dtype=torch.float64)
    assert len(SHARMA_2005) == 34
    forward, backward = ciede2000(lab1, lab2).flatten(), ciede2000(lab2, lab1).flatten()
    assert forward.dtype == torch.float64
    # the table rounds to 4 decimals: half a unit of the last place
    assert (forward - expected).abs().max().item() <= 5e-5
    assert torch.allclose(forward, backward, rtol=0, atol=1e-12)  # the formula is symmetric


def test_ciede2000_is_scikit_images_on_random_lab_images_with_greys_and_hue_wraps():
    from srgan.metrics import ciede2000

    generator = torch.Generator().manual_seed(3)
    lab1 = torch.rand(2, 3, 24, 24, generator=generator, dtype=torch.float64)
    lab2 = torch.rand(2, 3, 24, 24, generator=generator, dtype=torch.float64)
    for lab in (lab1, lab2):
        lab[:, 0] *= 100
        lab[:, 1:] = lab[:, 1:] * 256 - 128
    lab1[:, 1:, :4] = 0  # greys (no chroma: no hue) against colours, and against greys
    lab2[:, 1:, :2] = 0
    # hues 170 and 190 degrees apart: the two ways round the circle, where the mean hue wraps (at exactly
    # 180 the formula's mean hue jumps, as Sharma et al. note, and rounding picks the side)
    for rows, turn in ((slice(4, 6), 170.0), (slice(6, 8), 190.0)):
        angle = torch.atan2(lab1[:, 2, rows], lab1[:, 1, rows]) + torch.deg2rad(torch.tensor(turn, dtype=torch.float64))
        chroma = torch.hypot(lab1[:, 1, rows], lab1[:, 2, rows])
        lab2[:, 1, rows], lab2[:, 2, rows] = chroma * torch.cos(angle), chroma * torch.sin(angle)
    lab2[1, :, 8:10] = lab1[1, :, 8:10]  # identical colours: 0
    ours = ciede2000(lab1, lab2).numpy()
    theirs = np.stack(
        [
            skimage.color.deltaE_ciede2000(a.permute(1, 2, 0).numpy(), b.permute(1, 2, 0).numpy())
            for a, b in zip(lab1, lab2, strict=True)
        ]
    )
    assert ours.shape == (2, 24, 24) and np.isfinite(ours).all()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)
    assert (ours[1, 8:10] == 0).all()


def test_rgb_to_lab_is_scikit_images_rgb2lab_from_floats_and_from_8_bits():
    from srgan.metrics import rgb_to_lab

    generator = torch.Generator().manual_seed(4)
    rgb = torch.rand(2, 3, 16, 16, generator=generator, dtype=torch.float64)
    rgb[0, :, 0, :4] = torch.tensor([0.0, 1.0, 0.04045, 0.02])[None]  # both sides of the companding's knee, the ends
    expected = np.stack([skimage.color.rgb2lab(x.permute(1, 2, 0).numpy()) for x in rgb])
    np.testing.assert_allclose(rgb_to_lab(rgb).permute(0, 2, 3, 1).numpy(), expected, rtol=0, atol=1e-9)
    rgb8 = torch.randint(0, 256, (3, 16, 16), generator=generator, dtype=torch.uint8)
    expected8 = skimage.color.rgb2lab(rgb8.permute(1, 2, 0).numpy())  # scikit-image reads uint8 as /255
    np.testing.assert_allclose(rgb_to_lab(rgb8).permute(1, 2, 0).numpy(), expected8, rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="3xHxW"):
        rgb_to_lab(torch.zeros(4, 8, 8))


def photo_and_tinted(db: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A 48x48 photo crop (HR), and the same moved towards yellow (more red
    and green, less blue: positive b*) by `db` 8-bit levels, 3xHxW uint8."""
    hr = torch.from_numpy(skimage_photo("astronaut")[200:248, 200:248].copy()).permute(2, 0, 1)
    tint = torch.tensor([db, db, -db], dtype=torch.int16)[:, None, None]
    return (hr.short() + tint).clamp(0, 255).to(torch.uint8), hr


def test_colour_drift_is_skimages_mean_and_percentile_on_the_shaved_image_and_its_sign_says_yellow():
    from srgan.metrics import colour_drift

    sr, hr = photo_and_tinted(6)
    drift = colour_drift(sr, hr, 4)
    # the oracle: scikit-image's Lab and CIEDE2000 of the images less 4 px a side, numpy's percentile
    lab_sr = skimage.color.rgb2lab(sr.permute(1, 2, 0).numpy()[4:-4, 4:-4])
    lab_hr = skimage.color.rgb2lab(hr.permute(1, 2, 0).numpy()[4:-4, 4:-4])
    de = skimage.color.deltaE_ciede2000(lab_sr, lab_hr)
    assert drift["ciede2000"] == pytest.approx(de.mean(), abs=1e-9)
    assert drift["ciede2000_p99"] == pytest.approx(np.percentile(de, 99), abs=1e-9)
    assert drift["shift_a"] == pytest.approx((lab_sr[..., 1] - lab_hr[..., 1]).mean(), abs=1e-9)
    assert drift["shift_b"] == pytest.approx((lab_sr[..., 2] - lab_hr[..., 2]).mean(), abs=1e-9)
    assert drift["shift_b"] > 2  # towards yellow: b* up
    assert drift["ciede2000"] > 1 and drift["ciede2000_p99"] >= drift["ciede2000"]
    bluer = colour_drift(*reversed(photo_and_tinted(6)), 4)  # HR "drifted" from the tinted: towards blue
    assert bluer["shift_b"] < -2
    assert colour_drift(hr, hr, 4) == {"ciede2000": 0.0, "ciede2000_p99": 0.0, "shift_a": 0.0, "shift_b": 0.0}
    # the border is shaved: a change there alone is no drift
    framed = hr.clone()
    framed[:, :4], framed[:, -4:], framed[:, :, :4], framed[:, :, -4:] = 0, 0, 0, 0
    assert colour_drift(framed, hr, 4)["ciede2000"] == 0 and colour_drift(framed, hr, 3)["ciede2000"] > 0


def test_the_metric_names_lower_is_better_and_the_scores_columns():
    from srgan.configs.schema import METRIC_NAMES
    from srgan.metrics import ImageScores, better, parse_metric_names, worst_score

    assert "ciede2000" in METRIC_NAMES
    assert parse_metric_names("psnr, ciede2000", "--metrics") == ["psnr", "ciede2000"]
    assert better("ciede2000", 1.5, 2.0) and not better("ciede2000", 2.5, 2.0) and worst_score("ciede2000") > 1e300
    scores = ImageScores(["ciede2000", "psnr"], torch.device("cpu"), "--metrics")
    assert scores.columns == ("ciede2000", "ciede2000_p99", "shift_a", "shift_b", "psnr")
    sr, hr = photo_and_tinted(3)
    assert list(scores(sr, hr, 4)) == list(scores.columns)


@pytest.mark.parametrize("preset", sorted(p.stem for p in (Path(__file__).parents[1] / "configs").glob("*.yaml")))
def test_the_real_world_presets_track_colour_drift(preset):
    """A preset trained on Real-ESRGAN's degradations validates with ciede2000."""
    from srgan.configs import load_config

    config = load_config(preset)
    if config.data.degradation == "realesrgan":
        assert "ciede2000" in config.train.val_metrics


def test_validation_logs_the_drift_picks_best_by_ciede2000_and_runs_lists_it(photo_dir, val_dir, tmp_path, caplog):
    from srgan.configs import load_config
    from srgan.training import train
    from srgan.training.state import load_checkpoint

    overrides = tiny_overrides(
        photo_dir,
        tmp_path / "run",
        f"data.val={val_dir}",
        "train.max_steps=2",
        "train.val_every=1",
        "train.val_metrics=[psnr,ciede2000]",
        "train.best_by=ciede2000",
        "train.lr_g=0.01",  # moves the scores between validations
    )
    with caplog.at_level("INFO", logger="srgan"):
        run = train(load_config("demo", overrides))
    with open(run / "validation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    drift = ["ciede2000", "ciede2000_p99", "shift_a", "shift_b"]
    assert list(rows[0]) == [
        *("epoch", "step", "psnr", "ssim", "bicubic_psnr", "bicubic_ssim"),
        *(column for name in drift for column in (name, f"bicubic_{name}")),
    ]
    assert len({r["ciede2000"] for r in rows}) > 1  # the choice below means something
    assert all(float(r["ciede2000_p99"]) >= float(r["ciede2000"]) > 0 for r in rows)
    # bicubic's drift is the figure to beat: that of the validation image's x4 bicubic round trip
    from srgan.metrics import colour_drift

    hr = np.asarray(Image.open(val_dir / "ihc.png").convert("RGB"))
    lr = Image.fromarray(hr).resize((24, 24), Image.Resampling.BICUBIC)
    up = np.asarray(lr.resize((96, 96), Image.Resampling.BICUBIC))
    direct = colour_drift(torch.from_numpy(up.copy()).permute(2, 0, 1), torch.from_numpy(hr.copy()).permute(2, 0, 1), 4)
    # (validation.csv keeps 6 significant digits)
    assert float(rows[0]["bicubic_ciede2000"]) == pytest.approx(direct["ciede2000"], rel=1e-5)
    assert float(rows[0]["bicubic_shift_b"]) == pytest.approx(direct["shift_b"], rel=1e-5)
    best_row = min(rows, key=lambda r: float(r["ciede2000"]))
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["step"] == int(best_row["step"]) and best["best_by"] == "ciede2000"
    assert best["best_value"] == pytest.approx(float(best_row["ciede2000"]), rel=1e-5)
    with open(run / "epochs.csv", newline="") as f:
        assert list(next(csv.DictReader(f)))[-5:] == ["seconds", *drift]
    logged = caplog.text
    assert "ciede2000 " in logged and "shift_b " in logged and "CIEDE2000: CIELAB" in logged

    listed = run_cli("runs", tmp_path, "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["best_ciede2000"] == pytest.approx(float(best_row["ciede2000"]), rel=1e-5)
    assert row["last_ciede2000"] == pytest.approx(float(rows[-1]["ciede2000"]), abs=1e-9)
    assert row["last_shift_b"] == pytest.approx(float(rows[-1]["shift_b"]), abs=1e-9)
    table = run_cli("runs", tmp_path).stdout
    assert "CIEDE2000 best / last / bicubic" in table and "a*/b* shift last" in table
    assert f"{float(rows[-1]['shift_a']):+.2f} / {float(rows[-1]['shift_b']):+.2f}" in table


def test_evaluate_reports_the_drift_per_image_and_in_json(tmp_path):
    from srgan.inference.compare import bicubic_upscale
    from srgan.metrics import colour_drift

    folder = tmp_path / "set"
    folder.mkdir()
    hr = skimage_photo("coffee")[:48, :64]
    Image.fromarray(hr).save(folder / "coffee.png")
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    out = tmp_path / "scores.json"
    result = run_cli("evaluate", folder, "-k", checkpoint, "--metrics", "psnr,ciede2000", "--json", out)
    assert result.returncode == 0, result.stderr
    assert "SR ciede2000" in result.stdout and "bicubic shift_b" in result.stdout
    assert "b* + yellow" in result.stdout.splitlines()[0]
    scores = json.loads(out.read_text())
    assert scores["metrics"] == ["psnr", "ciede2000", "ciede2000_p99", "shift_a", "shift_b"]
    (image,) = scores["images"]
    lr = np.asarray(Image.fromarray(hr).resize((16, 12), Image.Resampling.BICUBIC))
    bicubic = torch.from_numpy(bicubic_upscale(lr, 4).copy()).permute(2, 0, 1)
    direct = colour_drift(bicubic, torch.from_numpy(hr.copy()).permute(2, 0, 1), 4)
    for name, value in direct.items():
        assert image["bicubic"][name] == pytest.approx(value, abs=1e-9)
    assert f"{image['sr']['shift_b']:+.3f}" in result.stdout
