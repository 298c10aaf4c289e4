"""Prepared datasets (`srgan prepare`): the format round-trips, its crops
are the folder's crops, damage is refused by name, an interrupted prepare
leaves nothing that looks complete."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import assert_refused, run_cli, set_args, skimage_photo, tiny_overrides
from srgan.configs import load_config
from srgan.data import FolderImages, PreparedImages, TrainPairs, find_images, load_rgb8, open_images, prepare_dataset
from srgan.files.errors import SrganError
from srgan.training import train
from srgan.training.state import load_checkpoint


@pytest.fixture(scope="module")
def prepared(photo_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared") / "photos.prepared"
    result = run_cli("prepare", photo_dir, "-o", out, "--workers", "2")
    assert result.returncode == 0, result
    assert "3 images" in result.stdout
    return out


def test_the_format_round_trips_every_image_in_the_folders_order(photo_dir, prepared):
    images = PreparedImages(prepared)
    sources = find_images(photo_dir)
    assert images.names == [p.name for p in sources]
    for i, source in enumerate(sources):
        assert np.array_equal(images.image(i), load_rgb8(source))
    index = json.loads((prepared / "index.json").read_text())
    assert index["format"] == "srgan-prepared" and index["version"] == 1
    assert all(entry["offset"] % 64 == 0 for entry in index["images"])


def test_crops_from_a_prepared_set_are_the_folders_crops(photo_dir, prepared):
    folder = TrainPairs(open_images(str(photo_dir), "data.train", 32, cache_mb=0), 32, 4, 3, seed=11)
    sliced = TrainPairs(open_images(str(prepared), "data.train", 32), 32, 4, 3, seed=11)
    assert isinstance(sliced.images, PreparedImages) and isinstance(folder.images, FolderImages)
    for key in [(1, 0), (1, 5), (2, 7), (9, 8)]:
        for a, b in zip(folder[key], sliced[key], strict=True):
            assert torch.equal(a, b)


def test_a_run_on_the_prepared_set_is_the_run_on_the_folder(photo_dir, prepared, tmp_path):
    runs = [
        train(load_config("demo", tiny_overrides(source, tmp_path / name, "data.workers=2")))
        for name, source in (("folder", photo_dir), ("prepared", prepared))
    ]
    a, b = (load_checkpoint(run) for run in runs)
    for key in ("generator", "discriminator"):
        assert all(torch.equal(t, b[key][name]) for name, t in a[key].items())


def test_a_worker_receives_no_copy_of_the_pixels(prepared):
    images = PreparedImages(prepared)
    images.image(0)  # maps the file
    assert len(pickle.dumps(images)) < 10_000  # what a spawned worker gets: the index, not the pixels
    assert isinstance(images.image(0), np.memmap)  # a view of the mapping: a crop copies only itself


def damaged_copy(prepared, tmp_path, change):
    copy = tmp_path / "copy.prepared"
    copy.mkdir()
    for name in ("index.json", "pixels.u8"):
        (copy / name).write_bytes((prepared / name).read_bytes())
    change(copy)
    return copy


def edit_index(field, value):
    def change(folder):
        index = json.loads((folder / "index.json").read_text())
        index[field] = value
        (folder / "index.json").write_text(json.dumps(index))

    return change


def truncate(folder):
    data = (folder / "pixels.u8").read_bytes()
    (folder / "pixels.u8").write_bytes(data[: len(data) - 100])


@pytest.mark.parametrize(
    "change, culprit",
    [
        (truncate, "the dataset is truncated or was changed; prepare it again"),
        (edit_index("version", 3), "prepared in format version 3; this srgan reads versions 1 and 2"),
        (edit_index("version", 2), "a paired set without a scale of 1 to 8"),
        (edit_index("format", "lmdb"), "not an srgan prepared dataset"),
        (edit_index("images", [{"name": "x", "height": 10**6, "width": 10**6, "offset": 0}]), "image 0 is damaged"),
        (lambda folder: (folder / "index.json").write_text("{not json"), "not a readable index"),
    ],
)
def test_a_damaged_or_foreign_dataset_is_refused_by_name(srgan, prepared, tmp_path, change, culprit):
    copy = damaged_copy(prepared, tmp_path, change)
    with pytest.raises(SrganError, match=culprit):
        PreparedImages(copy)
    result = srgan("train", *set_args(tiny_overrides(copy, tmp_path / "run")))
    assert_refused(result, culprit)
    assert "copy.prepared" in result.stderr and not (tmp_path / "run").exists()


def test_prepare_refuses_existing_outputs_and_skips_broken_sources(srgan, photo_dir, prepared, tmp_path):
    assert_refused(srgan("prepare", photo_dir, "-o", prepared), "exists (use --force")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert_refused(srgan("prepare", photo_dir, "-o", tmp_path / "mine", "--force"), "is not a prepared dataset")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"
    source = tmp_path / "source"
    source.mkdir()
    Image.fromarray(skimage_photo("coffee")[:64, :64]).save(source / "good.png")
    (source / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"junk" * 10)
    result = srgan("prepare", source, "-o", tmp_path / "out.prepared")
    assert result.returncode == 0, result
    assert "broken.png" in result.stderr and "1 skipped" in result.stdout
    assert PreparedImages(tmp_path / "out.prepared").names == ["good.png"]
    again = srgan("prepare", photo_dir, "-o", tmp_path / "out.prepared", "--force")
    assert again.returncode == 0 and len(PreparedImages(tmp_path / "out.prepared")) == 3
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.fixture(scope="module")
def many_photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("many")
    photo = skimage_photo("astronaut")
    for n in range(40):
        Image.fromarray(np.roll(photo, n * 7, axis=1)).save(folder / f"{n:03d}.png", compress_level=9)
    return folder


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_prepare_leaves_nothing_that_looks_complete(many_photos, tmp_path, signum):
    out = tmp_path / "out.prepared"
    process = subprocess.Popen(
        [sys.executable, "-m", "srgan.cli", "prepare", str(many_photos), "-o", str(out), "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C's default, even where the suite was started in the background (`make test &`): a shell
        # without job control starts background jobs with SIGINT ignored, and Python then keeps it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 60
    while time.time() < deadline and not any(
        p.suffix == ".tmp" and (p / "pixels.u8").exists() and (p / "pixels.u8").stat().st_size > 0
        for p in tmp_path.iterdir()
    ):
        time.sleep(0.02)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == (130 if signum == signal.SIGINT else -signal.SIGKILL), stderr
    assert not out.exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name != out.name]
    if signum == signal.SIGINT:
        assert leftovers == [] and "Traceback" not in stderr
    else:  # a kill leaves its temporary folder, under a name that is not the dataset's...
        assert len(leftovers) == 1 and leftovers[0].name.startswith(".out.prepared.")
        prepare_dataset([many_photos], out, workers=2)  # ...which the next prepare removes
        assert [p.name for p in tmp_path.iterdir()] == [out.name]
        assert len(PreparedImages(out)) == 40


def test_bench_data_reports_crops_per_second_and_memory(srgan, prepared):
    result = srgan(
        "bench",
        "data",
        "--set",
        f"data.train={prepared}",
        "--set",
        "data.crop_size=32",
        "--set",
        "data.batch_size=4",
        "--set",
        "data.workers=1",
        "--batches",
        "3",
        "--json",
    )
    assert result.returncode == 0, result
    figures = json.loads(result.stdout)
    assert figures["source"] == "prepared" and figures["batches"] == 3 and figures["crops_per_s"] > 0
    assert figures["peak_pss_mb"] > 0 and figures["worker_private_mb"] > 0 and figures["cpu_flags"] is not None
    assert os.path.isdir(prepared)


def test_bench_data_clocks_what_happens_between_batches(prepared, monkeypatch):
    """Workers go on producing while the main process reads memory figures:
    that time is part of the window, else a worker refills its prefetch
    queue unclocked and the bench reports pairs/s no worker can make."""
    import time

    from srgan.bench import data as bench
    from srgan.configs import load_config

    monkeypatch.setattr(bench, "SAMPLE_EVERY_S", 0.0)  # read memory after every batch...
    monkeypatch.setattr(bench, "_sample_memory", lambda peaks: time.sleep(0.05))  # ...50 ms each
    config = load_config("demo", [f"data.train={prepared}", "data.crop_size=32", "data.batch_size=4", "data.workers=1"])
    figures = bench.bench_data(config, batches=6)
    assert figures["crops_per_s"] <= 4 / 0.05
