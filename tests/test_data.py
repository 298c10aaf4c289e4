import logging

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import skimage_photo
from srgan.data import (
    BUILTIN_SAMPLES,
    EpochSampler,
    FolderImages,
    TrainPairs,
    ValImages,
    load_rgb8,
    open_images,
    resolve_images,
)
from srgan.files.errors import SrganError


def test_folder_is_searched_recursively(photo_dir):
    names = sorted(p.name for p in resolve_images(str(photo_dir), "data.train", 32))
    assert names == ["astronaut.png", "chelsea.png", "coffee.jpg"]


def test_broken_and_small_files_are_skipped_with_one_warning_each(tmp_path, caplog):
    Image.fromarray(skimage_photo("astronaut")[:64, :64]).save(tmp_path / "good.png")
    Image.fromarray(skimage_photo("astronaut")[:20, :20]).save(tmp_path / "small.png")
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg at all")
    (tmp_path / "notes.txt").write_text("ignored: not an image extension")
    with caplog.at_level(logging.WARNING, logger="srgan"):
        paths = resolve_images(str(tmp_path), "data.train", 32)
    assert [p.name for p in paths] == ["good.png"]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert any("broken.jpg" in m and "cannot be decoded" in m for m in messages)
    assert any("small.png" in m and "smaller than 32" in m for m in messages)


def test_a_file_broken_past_its_header_is_skipped_when_decoded(tmp_path, caplog):
    Image.fromarray(skimage_photo("coffee")[:64, :64]).save(tmp_path / "good.png")
    Image.fromarray(skimage_photo("chelsea")[:64, :64]).save(tmp_path / "cut.png")
    data = (tmp_path / "cut.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    paths = resolve_images(str(tmp_path), "data.train", 32)  # headers are fine
    with caplog.at_level(logging.WARNING, logger="srgan"):
        images = FolderImages(paths, cache_mb=64)
    assert images.names == ["good.png"]
    assert sum("cut.png" in r.getMessage() for r in caplog.records) == 1
    # without the cache it is found when a crop needs it: skipped, warned once, its neighbour used
    dataset = TrainPairs(FolderImages(paths, cache_mb=0), 32, 4, 1, 0)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="srgan"):
        crops = [dataset[(1, i)] for i in range(4)]
    assert all(hr.shape == (3, 32, 32) for _, hr in crops)
    assert sum("cut.png" in r.getMessage() for r in caplog.records) == 1


def test_no_usable_image_is_an_error_naming_the_folder(tmp_path):
    (tmp_path / "a.png").write_bytes(b"junk")
    with pytest.raises(SrganError, match=rf"data\.train: {tmp_path}: no usable image"):
        resolve_images(str(tmp_path), "data.train", 32)
    with pytest.raises(SrganError, match=r"data\.val: .*missing: no such folder"):
        resolve_images(str(tmp_path / "missing"), "data.val", 32)


def test_builtin_samples_are_the_skimage_photos():
    train = resolve_images(BUILTIN_SAMPLES, "data.train", 96)
    val = resolve_images(BUILTIN_SAMPLES, "data.val", 96)
    assert [p.stem for p in train] == ["astronaut", "coffee", "chelsea", "hubble_deep_field"]
    assert [p.stem for p in val] == ["ihc"]
    assert np.array_equal(load_rgb8(train[2]), skimage_photo("chelsea"))


def test_crops_pair_an_lr_with_its_hr_deterministically(photo_dir):
    dataset = TrainPairs(open_images(str(photo_dir), "data.train", 32), 32, 4, 2, seed=7)
    lr, hr = dataset[(1, 3)]
    assert lr.shape == (3, 8, 8) and hr.shape == (3, 32, 32)
    assert lr.dtype == torch.float32 and 0 <= hr.min() and hr.max() <= 1
    again_lr, again_hr = dataset[(1, 3)]
    assert torch.equal(lr, again_lr) and torch.equal(hr, again_hr)
    assert not torch.equal(hr, dataset[(2, 3)][1])  # another epoch, another crop
    # the LR is the bicubic downscale of the HR crop
    hr8 = (hr * 255).round().byte().permute(1, 2, 0).numpy()
    expected = np.array(Image.fromarray(hr8).resize((8, 8), Image.BICUBIC))
    assert torch.equal((lr * 255).round().byte().permute(1, 2, 0), torch.from_numpy(expected))


def test_batches_do_not_depend_on_the_number_of_workers(photo_dir):
    dataset = TrainPairs(open_images(str(photo_dir), "data.train", 32), 32, 4, 4, seed=3)
    results = []
    for workers in (0, 2):
        sampler = EpochSampler(len(dataset), 4, seed=3)
        sampler.set_epoch(2)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=4, sampler=sampler, num_workers=workers, drop_last=True
        )
        results.append([hr for _, hr in loader])
    assert len(results[0]) == 3
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


def test_sampler_resumes_mid_epoch_and_cycles_small_sets():
    sampler = EpochSampler(10, 3, seed=0)
    sampler.set_epoch(5)
    whole = list(sampler)
    assert len(whole) == 9 and len({i for _, i in whole}) == 9
    sampler.set_epoch(5, skip_keys=6)  # 2 batches of 3 done
    assert list(sampler) == whole[6:]
    tiny = EpochSampler(2, 4, seed=0)
    assert tiny.steps_per_epoch == 1 and len(list(tiny)) == 4


def test_ranks_share_each_global_batch_and_resume_on_another_count():
    """2 ranks of batch 3 see, step by step, the keys of 1 process of batch 6;
    an epoch stopped after 2 such steps goes on with 3 ranks from key 12."""
    one = EpochSampler(40, 6, seed=1)
    one.set_epoch(2)
    whole = list(one)
    ranks = [EpochSampler(40, 3, seed=1, rank=r, world=2) for r in range(2)]
    for r in ranks:
        r.set_epoch(2)
    shares = [list(r) for r in ranks]
    assert len(shares[0]) == len(shares[1]) == 6 * 3
    for step in range(6):
        assert shares[0][3 * step : 3 * step + 3] + shares[1][3 * step : 3 * step + 3] == whole[6 * step : 6 * step + 6]
    three = [EpochSampler(40, 2, seed=1, rank=r, world=3) for r in range(3)]
    for r in three:
        r.set_epoch(2, skip_keys=12)
    resumed = [list(r) for r in three]
    assert three[0].steps_left() == 4  # (36 keys an epoch at 6 a step) - 12 done = 24 keys: 4 steps of 6
    interleaved = [key for step in range(4) for r in resumed for key in r[2 * step : 2 * step + 2]]
    order = [key for key in whole]  # the same permutation, cut at 36 keys either way
    assert interleaved == order[12:36]


@pytest.mark.parametrize("mode", ["L", "P", "RGBA", "CMYK", "I;16", "LA"])
def test_any_mode_decodes_to_rgb8(tmp_path, mode):
    rgb = skimage_photo("chelsea")[:40, :50]
    if mode == "I;16":
        im = Image.fromarray(rgb[:, :, 0].astype(np.uint16) * 257)
    else:
        im = Image.fromarray(rgb).convert(mode)
    path = tmp_path / ("x.tif" if mode == "CMYK" else "x.png")
    im.save(path)
    out = load_rgb8(path)
    assert out.shape == (40, 50, 3) and out.dtype == np.uint8
    if mode == "I;16":
        assert np.array_equal(out[:, :, 0], rgb[:, :, 0])


def test_exif_orientation_is_applied(tmp_path):
    rgb = skimage_photo("chelsea")[:40, :60]
    im = Image.fromarray(rgb)
    exif = im.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    im.save(tmp_path / "turned.jpg", exif=exif)
    assert load_rgb8(tmp_path / "turned.jpg").shape == (60, 40, 3)


def test_validation_images_are_cropped_to_the_scale(val_dir):
    name, lr, hr = ValImages(open_images(str(val_dir), "data.val", 20), 4, max_size=90)[0]
    assert name == "ihc" and hr.shape == (3, 88, 88) and lr.shape == (3, 22, 22)


def test_the_decoded_cache_gives_the_same_crops(photo_dir, caplog):
    paths = resolve_images(str(photo_dir), "data.train", 32)
    with caplog.at_level(logging.WARNING, logger="srgan"):
        partial = FolderImages(paths, cache_mb=0.06)  # room for the first 128x128 photo only
    assert len(partial._cache) == 1
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "1 of 3 images" in warned[0] and "srgan prepare" in warned[0]
    datasets = [TrainPairs(FolderImages(paths, cache_mb=mb), 32, 4, 2, 5) for mb in (64, 0)]
    datasets.append(TrainPairs(partial, 32, 4, 2, 5))
    for key in [(1, 0), (1, 4), (3, 5)]:
        first = datasets[0][key]
        for other in datasets[1:]:
            assert all(torch.equal(a, b) for a, b in zip(first, other[key], strict=True))
