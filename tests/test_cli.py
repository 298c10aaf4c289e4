"""`srgan` as a user runs it: real processes, real files, exit codes."""

import csv
import json
import re

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from conftest import run_cli, run_process, set_args, skimage_photo, tiny_overrides


@pytest.fixture(scope="module")
def trained_run(photo_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    result = run_process("train", "--config", "demo", *set_args(tiny_overrides(photo_dir, run_dir)))  # a real one
    assert result.returncode == 0, result.stderr
    return run_dir, result


def test_train_writes_the_run_folder(trained_run):
    run_dir, result = trained_run
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["model"]["blocks"] == 1 and saved["train"]["max_steps"] == 2 and saved["name"] == "demo"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("epoch", "d_loss", "g_loss", "d_score", "g_score", "image", "adversarial", "lr_g", "images_per_s"):
            assert isinstance(row[key], (int, float)), key
    with open(run_dir / "epochs.csv") as f:
        epochs = list(csv.DictReader(f))
    assert len(epochs) == 1 and epochs[0]["step"] == "2"
    assert float(epochs[0]["g_loss"]) == pytest.approx((rows[0]["g_loss"] + rows[1]["g_loss"]) / 2, rel=1e-4)
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert {"generator", "discriminator", "optimizer_g", "optimizer_d", "epoch", "step", "config"} <= set(state)
    assert state["step"] == 2 and state["epoch"] == 1 and state["config"]["model"]["channels"] == 8
    assert (run_dir / "checkpoints" / "epoch_001.pt").is_file()
    assert not list(run_dir.rglob(".*.tmp"))
    assert "device cpu" in result.stderr and "precision fp32" in result.stderr
    from srgan.models import Discriminator, Generator

    g_count = sum(p.numel() for p in Generator(4, 1, 8, norm="none", residual="bicubic").parameters())  # demo's
    d_count = sum(p.numel() for p in Discriminator(8).parameters())
    assert f"generator {g_count:,} parameters, discriminator {d_count:,} parameters" in result.stderr
    assert "run folder" in (run_dir / "train.log").read_text()


def test_progress_bar_shows_the_four_values(trained_run):
    """The bar's last text: each of the four values with its number, the
    last logged row's (log_every=1: step 2's), to four decimals."""
    run_dir, result = trained_run
    last_row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    bars = [line for line in result.stderr.splitlines() if line.startswith("[1/1] ") and "%|" in line]
    assert bars, result.stderr
    for name in ("d_loss", "g_loss", "d_score", "g_score"):
        shown = re.search(rf"(?<!\w){name} (-?\d+\.\d{{4}})(?![\d\w])", bars[-1])
        assert shown, (name, bars[-1])
        assert shown.group(1) == f"{last_row[name]:.4f}", (name, bars[-1], last_row)


def test_train_refuses_a_folder_that_holds_a_run(trained_run, photo_dir):
    run_dir, _ = trained_run
    result = run_cli("train", *set_args(tiny_overrides(photo_dir, run_dir)))
    assert result.returncode == 2 and "already holds a run" in result.stderr


def test_upscale_a_451x300_photo_to_1804x1200(trained_run, tmp_path):
    run_dir, _ = trained_run
    photo = tmp_path / "chelsea.png"
    Image.fromarray(skimage_photo("chelsea")).save(photo)
    result = run_cli("upscale", str(photo), "--checkpoint", str(run_dir))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "chelsea_x4.png"
    assert result.stdout.strip() == str(out)
    assert Image.open(out).size == (1804, 1200)
    again = run_cli("upscale", str(photo), "--checkpoint", str(run_dir))
    assert again.returncode == 2 and "use --force" in again.stderr
    assert run_cli("upscale", str(photo), "--checkpoint", str(run_dir), "--force").returncode == 0


def test_upscale_a_folder_into_an_output_folder(trained_run, photo_dir, tmp_path):
    run_dir, _ = trained_run
    result = run_cli(
        "upscale", str(photo_dir), "-k", str(run_dir / "checkpoints" / "last.pt"), "-o", str(tmp_path / "out")
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "astronaut_x4.png",
        "chelsea_x4.png",
        "coffee_x4.png",
    ]
    assert Image.open(tmp_path / "out" / "coffee_x4.png").size == (512, 512)


def test_upscale_never_writes_over_an_input(trained_run, tmp_path):
    run_dir, _ = trained_run
    photo = tmp_path / "a_x4.png"
    Image.fromarray(skimage_photo("coffee")[:32, :32]).save(photo)
    result = run_cli("upscale", str(photo), "-k", str(run_dir), "-o", str(photo), "--force")
    assert result.returncode == 2 and "would overwrite an input" in result.stderr


def test_compare_writes_the_side_by_side_picture(trained_run, val_dir, tmp_path):
    run_dir, _ = trained_run
    out = tmp_path / "cmp.png"
    result = run_cli("compare", str(run_dir), str(val_dir / "ihc.png"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert Image.open(out).size == (3 * 96 + 2 * 8, 96)
    assert "PSNR bicubic" in result.stdout and "Y channel" in result.stdout
    # Each panel carries its label on a black box, white text, in its top-left
    # corner; below the box the original panel is the photo itself.
    picture = np.asarray(Image.open(out).convert("RGB"))
    for left in (0, 96 + 8, 2 * (96 + 8)):
        box = picture[:8, left : left + 40]
        assert (box == 0).all(axis=-1).any() and (box.min(axis=-1) > 200).any()
    hr = np.asarray(Image.open(val_dir / "ihc.png").convert("RGB"))[:96, :96]
    assert (picture[40:, 2 * (96 + 8) :] == hr[40:]).all()


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--set", "model.sclae=4"], "unknown key model.sclae (did you mean 'scale'?)"),
        (["train", "--set", "data.train=/no/such/folder"], "data.train: /no/such/folder: no such folder"),
        (["train", "--config", "nosuch"], "no preset named 'nosuch'"),
        (["config", "show", "demo", "--set", "train.epochs=x"], "train.epochs: expected an integer"),
        (["upscale", "x.png", "--checkpoint", "/no/such.pt"], "/no/such.pt: no such checkpoint"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_corrupt_and_foreign_checkpoints_are_one_line_errors(tmp_path):
    photo = tmp_path / "p.png"
    Image.fromarray(skimage_photo("coffee")[:32, :32]).save(photo)
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"\x00garbage")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    for path, message in ((corrupt, "not a readable checkpoint"), (foreign, "fit no generator srgan knows")):
        result = run_cli("upscale", str(photo), "--checkpoint", str(path))
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_config_show_prints_the_resolved_yaml():
    result = run_cli("config", "show", "srgan_x4", "--set", "model.scale=2")
    assert result.returncode == 0
    shown = yaml.safe_load(result.stdout)
    assert shown["model"]["scale"] == 2 and shown["loss"]["perceptual"]["layer"] == "relu5_4"
    listed = run_cli("config", "list").stdout.split()
    assert listed == [
        "compact_x4",
        "dat2_x4",
        "demo",
        "esrgan_x4",
        "finetune_esrgan_x4",
        "finetune_realesrgan_x4",
        "hat_x4",
        "leftthomas_x4",
        "omnisr_x4",
        "realesrgan_demo",
        "realesrgan_x4",
        "realesrnet_x4",
        "realplksr_x4",
        "realspan_x4",
        "span_x4",
        "srgan_x4",
        "srresnet_x4",
        "swinir_x4",
    ]


def test_samples_command_writes_the_builtin_photos(tmp_path):
    result = run_cli("samples", str(tmp_path))
    assert result.returncode == 0
    assert Image.open(tmp_path / "train" / "chelsea.png").size == (451, 300)
    assert (tmp_path / "val" / "immunohistochemistry.png").is_file()
    # The held-out set: RGB PNGs (a JPEG and a grey page converted), the drawn ones the same bits every time.
    held = {p.relative_to(tmp_path / "heldout").as_posix() for p in (tmp_path / "heldout").rglob("*.png")}
    assert held == {
        "photos/rocket.png",
        "photos/motorcycle.png",
        "photos/retina.png",
        "photos/page.png",
        "photos/color.png",
        "synthetic/chart.png",
        "synthetic/gradients.png",
        "synthetic/text.png",
        "synthetic/edges.png",
    }
    page = Image.open(tmp_path / "heldout" / "photos" / "page.png")
    assert page.mode == "RGB" and page.size == (384, 191)
    chart = np.asarray(Image.open(tmp_path / "heldout" / "synthetic" / "chart.png"))
    assert chart.shape == (192, 256, 3) and tuple(chart[10, 10]) == (0, 200, 0)
    assert run_cli("samples", str(tmp_path)).returncode == 2  # all there: refused without --force
