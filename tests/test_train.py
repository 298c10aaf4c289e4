"""A run you can trust: validation files, pictures, the paper's procedure,
resume that reproduces an uninterrupted run exactly."""

import csv
import json
import logging
import re

import pytest
import torch

from conftest import interrupt_at, tiny_overrides
from srgan.configs import load_config
from srgan.files.errors import SrganError
from srgan.models import generator_from_checkpoint
from srgan.training import train
from srgan.training.state import load_checkpoint


def tiny(photo_dir, val_dir, run_dir, *extra, base="demo"):
    return load_config(base, tiny_overrides(photo_dir, run_dir, f"data.val={val_dir}", "train.epochs=10", *extra))


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def table(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_validation_writes_scores_best_checkpoint_and_pictures(photo_dir, val_dir, tmp_path):
    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=4", "train.curves=true"))
    epochs = table(run / "epochs.csv")
    assert [e["epoch"] for e in epochs] == ["1", "2"]
    assert all(float(e["psnr"]) > 0 and 0 < float(e["ssim"]) < 1 for e in epochs)
    validation = table(run / "validation.csv")
    assert [v["step"] for v in validation] == ["2", "4"]
    # the bicubic baseline of the 96x96 validation photo, the same on every row
    assert len({v["bicubic_psnr"] for v in validation}) == 1 and float(validation[0]["bicubic_psnr"]) > 20
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    best_row = max(validation, key=lambda v: float(v["psnr"]))
    assert best["step"] == int(best_row["step"])
    assert best["best_by"] == "psnr" and best["best_value"] == pytest.approx(float(best_row["psnr"]), abs=1e-3)
    from PIL import Image

    sheet = Image.open(run / "samples" / "epoch_002.png")
    assert sheet.size == (3 * 96 + 2 * 8, 96)  # one validation image: bicubic | SR | HR
    assert Image.open(run / "curves.png").size[0] > 500


def test_curves_off_leaves_the_csv_files_alone(photo_dir, val_dir, tmp_path):
    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=2"))  # tiny_overrides: train.curves=false
    assert not (run / "curves.png").exists() and (run / "validation.csv").is_file()


def test_val_every_validates_on_steps(photo_dir, val_dir, tmp_path):
    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=5", "train.val_every=3"))
    assert [v["step"] for v in table(run / "validation.csv")] == ["3", "5"]  # every 3 steps, and at the end


def test_resume_refuses_other_networks_and_names_the_difference(photo_dir, val_dir, tmp_path):
    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=1"))
    changed = load_config(str(run / "config.yaml"), ["model.blocks=2", "model.scale=2"])
    with pytest.raises(SrganError, match=r"model\.scale 4 -> 2, model\.blocks 1 -> 2"):
        train(changed, resume=run)
    with pytest.raises(SrganError, match="not a run folder"):
        train(changed, resume=tmp_path / "nothing")


def test_a_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(photo_dir, val_dir, tmp_path):
    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=2"))
    poisoned = load_config(str(run / "config.yaml"), ["train.max_steps=4", "loss.weights.image=1e308"])
    with pytest.raises(SrganError, match=r"step 3: g_loss is inf"):
        train(poisoned, resume=run)
    assert load_checkpoint(run)["step"] == 2


def test_ema_weights_are_saved_and_used_for_upscaling(photo_dir, val_dir, tmp_path):
    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=3", "train.ema_decay=0.9"))
    state = load_checkpoint(run)
    differs = [not torch.equal(state["generator"][k], state["generator_ema"][k]) for k in state["generator"]]
    assert any(differs)
    g = generator_from_checkpoint(state)
    assert torch.equal(g.tail.weight, state["generator_ema"]["tail.weight"])


def test_init_from_starts_from_another_runs_generator(photo_dir, val_dir, tmp_path):
    first = train(tiny(photo_dir, val_dir, tmp_path / "first", "train.max_steps=2"))
    second = train(
        tiny(
            photo_dir, val_dir, tmp_path / "second", "train.max_steps=1", "train.lr_g=1e-12", f"model.init_from={first}"
        )
    )
    before, after = load_checkpoint(first)["generator"], load_checkpoint(second)["generator"]
    assert torch.allclose(before["head.0.weight"], after["head.0.weight"], atol=1e-8)
    with pytest.raises(
        SrganError, match=r"model\.init_from: .* has 1 blocks, the config asks for 2 blocks \(model\.blocks\)"
    ):
        train(tiny(photo_dir, val_dir, tmp_path / "third", "model.blocks=2", f"model.init_from={first}"))


def test_tensorboard_events_are_written(photo_dir, val_dir, tmp_path):
    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=2", "train.tensorboard=true"))
    events = list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 100


def test_srgan_plot_redraws_the_curves(photo_dir, val_dir, tmp_path):
    from conftest import run_cli

    run = train(tiny(photo_dir, val_dir, tmp_path / "run", "train.max_steps=2"))
    out = tmp_path / "c.png"
    result = run_cli("plot", str(run), "-o", str(out))
    assert result.returncode == 0 and out.stat().st_size > 1000
    (tmp_path / "empty").mkdir()
    assert run_cli("plot", str(tmp_path / "empty")).returncode == 2


def epoch_means_of_metrics(run):
    """Each epoch's mean of each loss over its steps, from metrics.jsonl: a
    row is the mean over the steps since the previous row, so it weighs as
    many steps as it covers."""
    sums, counts, previous = {}, {}, 0
    for row in rows(run / "metrics.jsonl"):
        steps, previous = row["step"] - previous, row["step"]
        for name in ("d_loss", "g_loss", "image", "adversarial"):
            sums[(row["epoch"], name)] = sums.get((row["epoch"], name), 0.0) + steps * row[name]
            counts[(row["epoch"], name)] = counts.get((row["epoch"], name), 0) + steps
    return {key: total / counts[key] for key, total in sums.items()}


def assert_epoch_rows_are_their_epochs_means(run, epochs, records):
    expected = epoch_means_of_metrics(run)
    table_rows = table(run / "epochs.csv")
    assert [(int(e["epoch"]), int(e["step"])) for e in table_rows] == epochs
    summaries = [r.getMessage() for r in records if re.fullmatch(r"\[\d/3\] .*\(\d+\.\d s\)", r.getMessage())]
    assert len(summaries) == len(epochs), summaries
    for e, summary in zip(table_rows, summaries, strict=True):
        for name in ("d_loss", "g_loss", "image", "adversarial"):
            assert float(e[name]) == pytest.approx(expected[(int(e["epoch"]), name)], rel=1e-5), (e, name)
        # the epoch's log line shows the same means
        assert f"[{e['epoch']}/3] d_loss {float(e['d_loss']):.4f}" in summary, (summary, e)


def test_each_epochs_csv_row_is_the_mean_of_its_epochs_steps(photo_dir, val_dir, tmp_path, caplog):
    """Rows every 3 steps, epochs of 2: epoch 1 ends between rows (its last
    step in no row yet), the run is stopped inside epoch 2 and resumed, and
    ends inside epoch 3. Each row of epochs.csv, and each epoch's log line,
    is that epoch's mean over its steps in metrics.jsonl."""
    overrides = ("data.val=null", "train.max_steps=5", "train.log_every=3")
    with caplog.at_level(logging.INFO, logger="srgan"):
        run = interrupt_at(tiny(photo_dir, val_dir, tmp_path / "run", *overrides), 3)
        train(tiny(photo_dir, val_dir, run, *overrides), resume=run)
    assert [row["step"] for row in rows(run / "metrics.jsonl")] == [2, 3, 4, 5]
    assert_epoch_rows_are_their_epochs_means(run, [(1, 2), (2, 4), (3, 5)], caplog.records)
