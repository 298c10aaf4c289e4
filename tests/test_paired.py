"""Paired data (data.train_lr, prepare --lr, evaluate/compare --lr): pairs
matched by relative path less extension, mismatched sizes warned and
skipped, crops aligned and flipped together, the same batches with any
number of workers, and scores on given LR inputs that equal bicubic's path
when the LR images are the bicubic downscales."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from conftest import assert_refused, bare_checkpoint, run_cli, skimage_photo
from srgan.configs import load_config
from srgan.data import EpochSampler, PreparedImages, ValImages, bicubic_downscale, prepare_dataset
from srgan.data.paired import PairedCrops, PairedImages, PairedValImages, open_image_set
from srgan.data.pairing import folder_pairs
from srgan.files.errors import SrganError
from srgan.inference.compare import mod_crop
from srgan.inference.evaluate import evaluate_folders
from srgan.metrics import ImageScores, psnr_y, quantize
from srgan.models import Generator, Runtime
from srgan.training.validation import bicubic_upscale, checked_validation_set

CPU32 = Runtime(torch.device("cpu"), "fp32")


def box_downscale(hr: np.ndarray, scale: int) -> np.ndarray:
    """Each LR pixel the rounded mean of its scale x scale HR block: a crop of
    it at (x, y) is exactly the downscale of the HR crop at (x s, y s)."""
    h, w = hr.shape[0] // scale, hr.shape[1] // scale
    blocks = hr[: h * scale, : w * scale].reshape(h, scale, w, scale, 3).astype(np.float64)
    return np.round(blocks.mean(axis=(1, 3))).astype(np.uint8)


def noise(height: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def save(array: np.ndarray, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return path


@pytest.fixture(scope="module")
def box_pairs(tmp_path_factory):
    """x4 pairs of random pixels, LR = box downscale; HR sides not all multiples of 4."""
    root = tmp_path_factory.mktemp("box")
    for n, (h, w) in enumerate([(64, 80), (66, 71), (90, 64)]):
        hr = noise(h, w, n)
        save(hr, root / "hr" / f"p{n}.png")
        save(box_downscale(hr, 4), root / "lr" / f"p{n}.png")
    return root


def test_pairs_match_by_relative_path_less_extension_and_unmatched_are_counted(tmp_path, caplog):
    hr_root, lr_root = tmp_path / "hr", tmp_path / "lr"
    for name in ("a.png", "sub/b.png", "c.png", "d.png"):
        save(noise(8, 8, 0), hr_root / name)
    for name in ("a.jpg", "sub/b.webp", "b.png", "z.bmp"):
        save(noise(2, 2, 0), lr_root / name)
    hr_paths = sorted(p for p in hr_root.rglob("*.png"))
    with caplog.at_level(logging.WARNING, "srgan"):
        pairs = folder_pairs(hr_paths, hr_root, lr_root, "data.train", "data.train_lr")
    assert [(h.relative_to(hr_root).as_posix(), lo.relative_to(lr_root).as_posix()) for h, lo in pairs] == [
        ("a.png", "a.jpg"),
        ("sub/b.png", "sub/b.webp"),
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert "data.train: 2 HR images without a partner, skipped: c, d" in messages
    assert "data.train_lr: 2 LR images without a partner, skipped: b, z" in messages


def test_an_lr_folder_inside_the_hr_folder_is_not_taken_for_hr_images(tmp_path):
    save(noise(8, 8, 0), tmp_path / "a.png")
    save(noise(2, 2, 0), tmp_path / "x4" / "a.png")
    hr_paths = sorted(tmp_path.rglob("*.png"))
    assert folder_pairs(hr_paths, tmp_path, tmp_path / "x4", "data.train", "data.train_lr") == [
        (tmp_path / "a.png", tmp_path / "x4" / "a.png")
    ]


def test_a_mismatched_pair_is_warned_by_name_and_skipped_and_none_left_is_an_error(box_pairs, tmp_path, caplog):
    hr, lr = box_pairs / "hr", tmp_path / "lr"
    save(box_downscale(load(hr / "p0.png"), 4), lr / "p0.png")
    save(box_downscale(load(hr / "p1.png"), 2), lr / "p1.png")  # x2 beside an x4 model
    with caplog.at_level(logging.WARNING, "srgan"):
        images = open_image_set(str(hr), str(lr), "data.train", "data.train_lr", 4, 32)
    assert isinstance(images, PairedImages) and images.names == ["p0.png"]
    assert any("skipping the pair" in r.getMessage() and "p1.png" in r.getMessage() for r in caplog.records)
    (lr / "p0.png").unlink()
    with pytest.raises(SrganError, match="data.train, data.train_lr: no pair whose sizes agree with model.scale 4"):
        open_image_set(str(hr), str(lr), "data.train", "data.train_lr", 4, 32)


def load(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def test_an_hr_larger_by_less_than_the_scale_is_cut_to_lr_times_scale(box_pairs):
    images = open_image_set(str(box_pairs / "hr"), str(box_pairs / "lr"), "data.train", "data.train_lr", 4, 32)
    assert isinstance(images, PairedImages)
    lr, hr = images.pair(1)  # 66 x 71 beside 16 x 17
    assert lr.shape == (16, 17, 3) and hr.shape == (64, 68, 3)
    assert np.array_equal(hr, load(box_pairs / "hr" / "p1.png")[:64, :68])


def test_crops_are_aligned_and_flipped_and_turned_together(box_pairs):
    images = open_image_set(str(box_pairs / "hr"), str(box_pairs / "lr"), "data.train", "data.train_lr", 4, 32)
    crops = PairedCrops(images, 32, 4, repeat=4, seed=5)
    seen = set()
    for key in [(e, i) for e in range(3) for i in range(len(crops))]:
        lr, hr = crops[key]
        assert lr.shape == (3, 8, 8) and hr.shape == (3, 32, 32)
        lr8 = (lr * 255).round().byte().permute(1, 2, 0).numpy()
        hr8 = (hr * 255).round().byte().permute(1, 2, 0).numpy()
        assert np.array_equal(lr8, box_downscale(hr8, 4)), key  # random pixels: any misalignment shows
        seen.add(hr8.tobytes())
    assert len(seen) == 3 * len(crops)  # crops (and their flips and turns) differ


def test_bicubic_pairs_crop_to_the_downscale_of_the_hr_crop_away_from_its_border(tmp_path):
    photo = skimage_photo("astronaut")[:128, :128]
    save(photo, tmp_path / "hr" / "a.png")
    save(bicubic_downscale(photo, 4), tmp_path / "lr" / "a.png")
    images = open_image_set(str(tmp_path / "hr"), str(tmp_path / "lr"), "data.train", "data.train_lr", 4, 64)
    crops = PairedCrops(images, 64, 4, repeat=1, seed=0)
    for epoch in range(4):
        lr, hr = crops[(epoch, 0)]
        hr8 = (hr * 255).round().byte().permute(1, 2, 0).numpy()
        expected = bicubic_downscale(hr8, 4).astype(int)
        lr8 = (lr * 255).round().byte().permute(1, 2, 0).numpy().astype(int)
        # PIL's x4 bicubic reads 2 LR pixels beyond a pixel's block: inside, the two agree
        assert np.abs(lr8[2:-2, 2:-2] - expected[2:-2, 2:-2]).max() <= 1


def test_batches_are_the_same_with_0_and_2_workers(box_pairs):
    images = open_image_set(str(box_pairs / "hr"), str(box_pairs / "lr"), "data.train", "data.train_lr", 4, 32)
    crops = PairedCrops(images, 32, 4, repeat=3, seed=9)

    def batches(workers):
        sampler = EpochSampler(len(crops), 3, seed=9)
        sampler.set_epoch(2)
        return [b for b in DataLoader(crops, batch_size=3, sampler=sampler, num_workers=workers)]

    for (lr0, hr0), (lr2, hr2) in zip(batches(0), batches(2), strict=True):
        assert torch.equal(lr0, lr2) and torch.equal(hr0, hr2)


def test_validation_pairs_are_centre_crops_aligned_and_bicubic_scores_the_given_lr(box_pairs):
    images = open_image_set(str(box_pairs / "hr"), str(box_pairs / "lr"), "data.val", "data.val_lr", 4, 19)
    val, bicubic = checked_validation_set(images, 4, 48, ImageScores(["psnr", "ssim"], torch.device("cpu"), "x"))
    assert isinstance(val, PairedValImages)
    name, lr, hr = val[2]  # 90 x 64 beside 22 x 16: 12 x 12 LR from (5, 2)
    assert name == "p2" and lr.shape == (3, 12, 12) and hr.shape == (3, 48, 48)
    lr8 = (lr * 255).round().byte().permute(1, 2, 0).numpy()
    assert np.array_equal(lr8, load(box_pairs / "lr" / "p2.png")[5:17, 2:14])
    hr8 = (hr * 255).round().byte().permute(1, 2, 0).numpy()
    assert np.array_equal(hr8, load(box_pairs / "hr" / "p2.png")[20:68, 8:56])
    # the figure to beat: bicubic from the given LR, not from a downscale of the HR
    expected = np.mean([psnr_y(bicubic_upscale(lr, 4), quantize(hr), 4) for _, lr, hr in (val[i] for i in range(3))])
    assert bicubic["psnr"] == pytest.approx(expected, abs=1e-12)
    _, bicubic_lr, _ = ValImages(images.hr, 4, 48)[2]
    assert not torch.equal(bicubic_lr, lr)


def test_prepare_lr_round_trips_the_pairs_and_gives_the_folders_crops(box_pairs, tmp_path):
    result = run_cli("prepare", box_pairs / "hr", "--lr", box_pairs / "lr", "--scale", "4", "-o", tmp_path / "set")
    assert result.returncode == 0, result
    assert "3 x4 pairs" in result.stdout
    prepared = PreparedImages(tmp_path / "set")
    assert prepared.pairs_scale == 4
    folder = open_image_set(str(box_pairs / "hr"), str(box_pairs / "lr"), "data.train", "data.train_lr", 4, 32)
    sliced = open_image_set(str(tmp_path / "set"), None, "data.train", "data.train_lr", 4, 32)
    assert isinstance(folder, PairedImages) and isinstance(sliced, PairedImages)
    for i in range(3):
        for a, b in zip(folder.pair(i), sliced.pair(i), strict=True):
            assert np.array_equal(a, b)
    a, b = PairedCrops(folder, 32, 4, 2, seed=1), PairedCrops(sliced, 32, 4, 2, seed=1)
    for key in [(0, 0), (1, 4), (3, 5)]:
        assert all(torch.equal(x, y) for x, y in zip(a[key], b[key], strict=True))
    with pytest.raises(SrganError, match="holds x4 pairs; model.scale is 2"):
        open_image_set(str(tmp_path / "set"), None, "data.train", "data.train_lr", 2, 16)
    with pytest.raises(SrganError, match="data.train_lr: data.train .* is a prepared set"):
        open_image_set(str(tmp_path / "set"), str(box_pairs / "lr"), "data.train", "data.train_lr", 4, 32)
    assert_refused(run_cli("prepare", box_pairs / "hr", "--lr", box_pairs / "lr", "-o", tmp_path / "x"), "--scale")


def test_prepared_pairs_whose_sizes_were_forged_are_refused(box_pairs, tmp_path):
    import json

    prepare_dataset([box_pairs / "hr"], tmp_path / "set", 1, lr_folder=box_pairs / "lr", scale=4)
    index = json.loads((tmp_path / "set" / "index.json").read_text())
    index["images"][0]["lr"]["width"] += 1
    (tmp_path / "set" / "index.json").write_text(json.dumps(index))
    with pytest.raises(SrganError, match="image 0 is damaged"):
        PreparedImages(tmp_path / "set")


@pytest.fixture(scope="module")
def photo_pairs(tmp_path_factory):
    """HR photos of sides that are not multiples of 4, and their LR made as
    `srgan evaluate` makes it: the bicubic downscale of the mod-cropped HR."""
    root = tmp_path_factory.mktemp("photo_pairs")
    for name, (top, left) in {"astronaut": (90, 140), "coffee": (40, 190)}.items():
        hr = skimage_photo(name)[top : top + 70, left : left + 61]
        save(hr, root / "hr" / f"{name}.png")
        save(bicubic_downscale(mod_crop(hr, 4), 4), root / "lr" / f"{name}.png")
    return root


def test_evaluate_lr_on_the_bicubic_downscales_scores_as_evaluating_the_hr(photo_pairs):
    torch.manual_seed(0)
    generator = Generator(4, 1, 8, norm="none")
    plain = evaluate_folders(generator, CPU32, [photo_pairs / "hr"])
    paired = evaluate_folders(generator, CPU32, [photo_pairs / "hr"], lr_folder=photo_pairs / "lr")
    assert plain["images"] == paired["images"] and len(paired["images"]) == 2


def test_evaluate_and_compare_take_lr_and_refuse_sizes_that_disagree(photo_pairs, tmp_path):
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    hr, lr = photo_pairs / "hr", photo_pairs / "lr"
    result = run_cli("evaluate", hr, "--lr", lr, "-k", checkpoint, "--device", "cpu")
    assert result.returncode == 0, result
    assert "astronaut" in result.stdout and "coffee" in result.stdout
    assert result.stdout.splitlines()[0].endswith(f"; LR inputs from {lr}")
    out = tmp_path / "cmp.png"
    result = run_cli("compare", checkpoint, hr / "coffee.png", "--lr", lr, "-o", out, "--device", "cpu")
    assert result.returncode == 0, result
    assert Image.open(out).size[1] == 68  # 17 LR rows x 4
    wrong = tmp_path / "wrong"
    save(bicubic_downscale(mod_crop(load(hr / "coffee.png"), 2), 2), wrong / "coffee.png")
    assert_refused(run_cli("evaluate", hr, "--lr", wrong, "-k", checkpoint, "--device", "cpu"), "no pair")
    assert_refused(
        run_cli("compare", checkpoint, hr / "coffee.png", "--lr", wrong, "-o", tmp_path / "c2.png", "--device", "cpu"),
        "does not agree",
    )


@pytest.mark.parametrize(
    "overrides, culprit",
    [
        (["data.train_lr=/x"], "data.train_lr: paired data needs data.train to be a folder of HR images"),
        (["data.val=null", "data.val_lr=/x"], "data.val_lr: given while data.val is null"),
        (["data.train_lr=''"], "data.train_lr: expected a folder of LR images or null"),
    ],
)
def test_paired_settings_that_cannot_work_are_refused_by_key(overrides, culprit):
    with pytest.raises(SrganError, match=culprit):
        load_config("demo", overrides)
