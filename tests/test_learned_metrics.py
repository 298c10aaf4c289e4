"""LPIPS and DISTS (metrics/learned.py) against their authors'
packages on the same images and the same backbone weights: torchvision
files of random weights written here into a temporary TORCH_HOME, where
torchvision's loader looks (nothing is downloaded). Then the paths that use
them: evaluate, compare, validation and best.pt, runs, plot, and the
one-line refusal when a weight file is missing."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import bare_checkpoint, run_cli, set_args, skimage_photo, tiny_overrides

FILES = {"alexnet": "alexnet-owt-7be5be79.pth", "vgg16": "vgg16-397923af.pth"}


@pytest.fixture(scope="module")
def torch_home(tmp_path_factory):
    """A TORCH_HOME whose hub cache holds random-weight AlexNet and VGG16
    files under torchvision's names. Only `features` matter to the metrics:
    the classifier's tensors (which the loaders want present, in shape) are
    stored as one broadcast value, to keep the files small."""
    import torchvision

    home = tmp_path_factory.mktemp("torch_home")
    cache = home / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    generator = torch.Generator().manual_seed(1)
    for network, name in FILES.items():
        with torch.device("meta"):  # the shapes only: no time spent initialising a classifier
            shapes = {key: value.shape for key, value in getattr(torchvision.models, network)().state_dict().items()}
        state = {}
        for key, shape in shapes.items():
            if key.startswith("features."):
                state[key] = torch.randn(shape, generator=generator) * 0.1
            else:
                state[key] = torch.zeros(1).expand(shape)
        torch.save(state, cache / name)
    return home


@pytest.fixture
def cached_weights(torch_home, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    return torch_home


@pytest.fixture(scope="module")
def pair():
    """A 64x64 photo crop (HR) and its x4 bicubic round trip (an SR-like image), 3x64x64 uint8."""
    hr = skimage_photo("astronaut")[100:164, 180:244]
    small = Image.fromarray(hr).resize((16, 16), Image.Resampling.BICUBIC)
    sr = np.asarray(small.resize((64, 64), Image.Resampling.BICUBIC))
    return torch.from_numpy(sr.copy()).permute(2, 0, 1), torch.from_numpy(hr.copy()).permute(2, 0, 1)


def load_features(slices, torch_home, network: str) -> None:
    """Give the reference's backbone slices (modules named by their index in
    torchvision's `features`) the cached file's weights."""
    state = torch.load(torch_home / "hub" / "checkpoints" / FILES[network], weights_only=True)
    for part in slices:
        for index, module in part.named_children():
            if isinstance(module, torch.nn.Conv2d):
                module.weight.data.copy_(state[f"features.{index}.weight"])
                module.bias.data.copy_(state[f"features.{index}.bias"])


@pytest.mark.parametrize(("metric", "net", "network"), [("lpips", "alex", "alexnet"), ("lpips_vgg", "vgg", "vgg16")])
def test_lpips_is_the_authors_on_inputs_scaled_to_minus_one_one(cached_weights, pair, metric, net, network):
    """The reference: the `lpips` package's network with a random backbone,
    given the cached file's features here, fed [-1, 1] as the authors
    specify. Fed [0, 1] unscaled, it gives another number: the convention
    is checked, not only the plumbing."""
    import lpips

    from srgan.metrics.learned import LearnedMetric

    ours = LearnedMetric(metric, torch.device("cpu"), "--metrics").distance(*pair)
    reference = lpips.LPIPS(net=net, pnet_rand=True, verbose=False).eval()
    backbone = reference.net
    load_features(
        [backbone.slice1, backbone.slice2, backbone.slice3, backbone.slice4, backbone.slice5], cached_weights, network
    )
    sr, hr = (image[None].float() / 255 for image in pair)
    with torch.no_grad():
        expected = reference(sr * 2 - 1, hr * 2 - 1).item()
        unscaled = reference(sr, hr).item()
    assert ours == pytest.approx(expected, abs=1e-5)
    assert abs(unscaled - expected) > 1e-3  # so a [0, 1] input given as is would be caught
    assert ours > 0


def test_dists_is_the_authors_package(cached_weights, pair):
    """DISTS_pytorch, the authors' package, reads the same cached VGG16 file
    through torchvision and takes [0, 1]."""
    from DISTS_pytorch import DISTS

    from srgan.metrics.learned import LearnedMetric

    ours = LearnedMetric("dists", torch.device("cpu"), "--metrics").distance(*pair)
    sr, hr = (image[None].float() / 255 for image in pair)
    with torch.no_grad():
        reference = DISTS().eval()
        expected, itself = reference(sr, hr).item(), reference(hr, hr).item()
    assert ours == pytest.approx(expected, abs=1e-5)
    assert ours > 1e-3 and abs(itself) < 1e-5  # a distance: zero between an image and itself


def test_evaluate_reports_learned_metrics_per_image_and_in_json(cached_weights, tmp_path, pair):
    from srgan.inference.compare import bicubic_upscale
    from srgan.metrics.learned import LearnedMetric

    folder = tmp_path / "set"
    folder.mkdir()
    hr = pair[1].permute(1, 2, 0).numpy()
    Image.fromarray(hr).save(folder / "crop.png")
    Image.fromarray(skimage_photo("coffee")[:48, :64]).save(folder / "coffee.png")
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    out = tmp_path / "scores.json"
    result = run_cli("evaluate", folder, "-k", checkpoint, "--metrics", "psnr,lpips", "--json", out)
    assert result.returncode == 0, result.stderr
    assert "SR lpips" in result.stdout and "bicubic lpips" in result.stdout and "lower is better" in result.stdout
    scores = json.loads(out.read_text())
    assert scores["metrics"] == ["psnr", "lpips"]
    crop = next(im for im in scores["images"] if im["name"] == "crop")
    assert set(crop["sr"]) == {"psnr", "lpips"} and set(crop["bicubic"]) == {"psnr", "lpips"}
    # bicubic's LPIPS is that of the x4 bicubic round trip, computed here directly
    lr = np.asarray(Image.fromarray(hr).resize((16, 16), Image.Resampling.BICUBIC))
    bicubic = torch.from_numpy(bicubic_upscale(lr, 4).copy()).permute(2, 0, 1)
    direct = LearnedMetric("lpips", torch.device("cpu"), "--metrics").distance(bicubic, pair[1])
    assert crop["bicubic"]["lpips"] == pytest.approx(direct, abs=1e-6)
    mean = np.mean([im["sr"]["lpips"] for im in scores["images"]])
    assert scores["mean"]["sr"]["lpips"] == pytest.approx(mean)
    # compare labels each panel with the chosen metrics
    picture = tmp_path / "cmp.png"
    result = run_cli(
        "compare", checkpoint, folder / "crop.png", "-o", picture, "--metrics", "lpips", "--precision", "fp32"
    )
    assert result.returncode == 0 and picture.is_file(), result.stderr
    assert f"LPIPS bicubic {crop['bicubic']['lpips']:.4f}, SR {crop['sr']['lpips']:.4f}" in result.stdout


def test_unknown_metric_names_are_refused_listing_the_valid_ones(tmp_path):
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    result = run_cli("evaluate", tmp_path, "-k", checkpoint, "--metrics", "psnr,lpipz")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "lpipz" in result.stderr and "psnr, ssim, lpips, lpips_vgg, dists" in result.stderr
    from srgan.configs import load_config
    from srgan.files.errors import SrganError

    with pytest.raises(SrganError, match=r"train\.best_by: lpips is not among train\.val_metrics"):
        load_config("demo", ["train.best_by=lpips"])
    with pytest.raises(SrganError, match=r"train\.val_metrics\[1\]: expected one of psnr, ssim, lpips"):
        load_config("demo", ["train.val_metrics=[psnr,fid]"])


def test_missing_weights_stop_evaluate_and_train_before_any_work(tmp_path, monkeypatch, photo_dir, val_dir):
    """No file in the cache and no download (a dead proxy on loopback): one
    line naming the file and its folder, exit 2, nothing written."""
    import urllib.request

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    urllib.request.install_opener(None)  # the next download builds its opener, and reads the proxy, afresh
    cache = tmp_path / "empty" / "hub" / "checkpoints"
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    try:
        result = run_cli(
            "evaluate", val_dir, "-k", checkpoint, "--metrics", "psnr,dists", "--json", tmp_path / "s.json"
        )
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        line = result.stderr.strip().splitlines()[-1]
        assert "vgg16-397923af.pth" in line and str(cache) in line and "dists" in line
        assert not (tmp_path / "s.json").exists()
        run_dir = tmp_path / "run"
        overrides = tiny_overrides(photo_dir, run_dir, f"data.val={val_dir}", "train.val_metrics=[psnr,lpips]")
        result = run_cli("train", "--config", "demo", *set_args(overrides))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("srgan: error: train.val_metrics: lpips") and "alexnet-owt-7be5be79.pth" in line
        assert not run_dir.exists()  # stopped before the run folder
    finally:
        urllib.request.install_opener(None)


def test_validation_picks_best_by_lpips_and_runs_and_plot_show_it(cached_weights, photo_dir, val_dir, tmp_path):
    from srgan.configs import load_config
    from srgan.training import train
    from srgan.training.state import load_checkpoint

    overrides = tiny_overrides(
        photo_dir,
        tmp_path / "run",
        f"data.val={val_dir}",
        "train.epochs=10",
        "train.max_steps=4",
        "train.val_every=2",
        "train.val_metrics=[psnr,lpips]",
        "train.best_by=lpips",
        "train.lr_g=0.01",  # moves the scores between validations
    )
    run = train(load_config("demo", overrides))
    with open(run / "validation.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["epoch", "step", "psnr", "ssim", "bicubic_psnr", "bicubic_ssim", "lpips", "bicubic_lpips"]
    assert [r["step"] for r in rows] == ["2", "4"] and all(r["ssim"] == "" for r in rows)
    assert len({r["lpips"] for r in rows}) > 1  # the choice below means something
    best_row = min(rows, key=lambda r: float(r["lpips"]))
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["step"] == int(best_row["step"]) and best["best_by"] == "lpips"
    assert best["best_value"] == pytest.approx(float(best_row["lpips"]), abs=1e-5)
    with open(run / "epochs.csv", newline="") as f:
        epochs = list(csv.DictReader(f))
    assert list(epochs[0])[-2:] == ["seconds", "lpips"]  # the chosen learned metrics follow the fixed columns
    by_step = {r["step"]: r["lpips"] for r in rows}
    closing = [r for r in epochs if r["lpips"]]  # an epoch's row holds its validation when it ended with one
    assert closing and all(r["lpips"] == by_step[r["step"]] for r in closing)

    listed = run_cli("runs", tmp_path, "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["best_lpips"] == pytest.approx(float(best_row["lpips"]), abs=1e-5)
    assert row["last_lpips"] == pytest.approx(float(rows[-1]["lpips"]), abs=1e-5)
    assert "LPIPS best / last / bicubic" in run_cli("runs", tmp_path).stdout
    picture = tmp_path / "lpips.png"
    drawn = run_cli("plot", run, "-o", picture, "--metric", "lpips")
    assert drawn.returncode == 0 and picture.stat().st_size > 1000, drawn.stderr
    assert "--metric" in run_cli("plot", run, "-o", tmp_path / "x.png", "--metric", "fid").stderr

    # A checkpoint from before train.best_by holds best_psnr and a last_validation
    # of psnr and ssim: it resumes, keeping that best (here under the run's psnr).
    from srgan.models import save_checkpoint
    from srgan.training.loop import Trainer

    state = load_checkpoint(run / "checkpoints" / "last.pt")
    old = {k: v for k, v in state.items() if k not in ("best_by", "best_value")}
    old["best_psnr"] = 12.5
    old["last_validation"] = {"step": state["step"], "psnr": 20.0, "ssim": 0.5, "best": False}
    save_checkpoint(run / "checkpoints" / "last.pt", old)
    for best_by, kept in (("psnr", 12.5), ("lpips", math.inf)):  # another metric's best starts over
        resumed = load_config(str(run / "config.yaml"), [f"train.best_by={best_by}", "train.max_steps=6"])
        trainer = Trainer(resumed, resume=run)
        try:
            assert trainer.progress.best_by == best_by and trainer.progress.best_value == kept
        finally:
            trainer.close()


def test_a_resume_that_changes_the_learned_metrics_rewrites_epochs_csv_in_its_columns(tmp_path):
    """epochs.csv gains a column a learned metric (after seconds); a resume
    with other train.val_metrics keeps every row, in the new run's columns."""
    from srgan.training.logs import EPOCH_COLUMNS, MetricLog

    old = ",".join(EPOCH_COLUMNS) + "\n" + "1,10" + "," * (len(EPOCH_COLUMNS) - 2) + "\n"
    (tmp_path / "epochs.csv").write_text(old)
    learned = MetricLog(tmp_path, val_metrics=("psnr", "lpips", "dists"))
    learned.resume({}, step=10, keep_epochs_before=2, validated=True)
    with open(tmp_path / "epochs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [*EPOCH_COLUMNS, "lpips", "dists"] and rows[0]["step"] == "10" and rows[0]["lpips"] == ""
    MetricLog(tmp_path, val_metrics=("psnr",)).resume({}, step=10, keep_epochs_before=2, validated=True)
    assert (tmp_path / "epochs.csv").read_text() == old


def plant(home, network: str, fill: float | None = None):
    """A TORCH_HOME whose cache holds `network`'s file under torchvision's
    name, of random features (one of them `fill` everywhere when given)."""
    import torchvision

    cache = home / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    with torch.device("meta"):
        shapes = {key: value.shape for key, value in getattr(torchvision.models, network)().state_dict().items()}
    generator = torch.Generator().manual_seed(2)
    state = {
        key: torch.randn(shape, generator=generator) * 0.1
        if key.startswith("features.")
        else torch.zeros(1).expand(shape)
        for key, shape in shapes.items()
    }
    if fill is not None:
        state["features.3.weight"].fill_(fill)
    torch.save(state, cache / FILES[network])
    return cache / FILES[network]


def test_a_backbone_file_of_nan_weights_is_refused_before_any_work(tmp_path, monkeypatch, photo_dir, val_dir):
    """The right name and keys, NaN values: `lpips nan` and exit 0 before;
    training with best_by lpips wrote NaN rows and never a best.pt."""
    bad = plant(tmp_path / "home", "alexnet", fill=float("nan"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    result = run_cli("evaluate", val_dir, "-k", checkpoint, "--metrics", "psnr,lpips", "--json", tmp_path / "s.json")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result
    line = result.stderr.strip().splitlines()[-1]
    assert str(bad) in line and "features.3.weight" in line and "NaN" in line
    assert not (tmp_path / "s.json").exists()
    run_dir = tmp_path / "run"
    overrides = tiny_overrides(
        photo_dir, run_dir, f"data.val={val_dir}", "train.val_metrics=[psnr,lpips]", "train.best_by=lpips"
    )
    result = run_cli("train", "--config", "demo", *set_args(overrides))
    assert result.returncode == 2 and str(bad) in result.stderr.strip().splitlines()[-1], result
    assert not run_dir.exists()


def test_a_backbone_file_whose_hash_is_not_its_names_is_said_where_the_score_is(cached_weights, tmp_path, pair):
    """torchvision's file names carry the first 8 hex digits of the file's
    sha256; the planted random weights do not match theirs: a warning (tests
    plant such files), on the table's line that names the metric and in the
    JSON, never silence. The file is hashed once per process."""
    import hashlib

    from srgan.metrics import learned as learned_metrics

    folder = tmp_path / "set"
    folder.mkdir()
    Image.fromarray(pair[1].permute(1, 2, 0).numpy()).save(folder / "crop.png")
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    out = tmp_path / "scores.json"
    result = run_cli("evaluate", folder, "-k", checkpoint, "--metrics", "psnr,lpips", "--json", out)
    assert result.returncode == 0, result.stderr
    cached = cached_weights / "hub" / "checkpoints" / FILES["alexnet"]
    digest = hashlib.sha256(cached.read_bytes()).hexdigest()
    title = result.stdout.splitlines()[0]
    assert "lpips" in title and FILES["alexnet"] in title and digest[:8] in title and "7be5be79" in title
    scores = json.loads(out.read_text())
    (weights,) = scores["learned_weights"]
    assert weights == {
        "metric": "lpips",
        "file": str(cached),
        "sha256": digest,
        "name_says": "7be5be79",
        "matches": False,
    }
    assert any(FILES["alexnet"] in w and "7be5be79" in w for w in scores["warnings"])
    hashed = dict(learned_metrics.DIGESTS)
    learned_metrics.LearnedMetric("lpips", torch.device("cpu"), "--metrics")
    assert learned_metrics.DIGESTS == hashed and len([k for k in hashed if k[0] == cached.resolve()]) == 1
    # a file whose name's prefix is its own hash is torchvision's: nothing to say
    named = tmp_path / f"alexnet-owt-{digest[:8]}.pth"
    named.write_bytes(cached.read_bytes())
    assert learned_metrics.weights_check(named).matches


def test_a_nan_validation_score_is_said_and_does_not_stop_best_pt(cached_weights, photo_dir, val_dir, tmp_path, caplog):
    """A NaN mean (here the first validation's, as finite weights overflowing
    would give) is warned about and is no best; the next finite one is."""
    from srgan.configs import load_config
    from srgan.training import loop, train
    from srgan.training.state import load_checkpoint

    real, calls = loop.validate, []

    def first_nan(*args, **kwargs):
        sums, count = real(*args, **kwargs)
        calls.append(1)
        return ([math.nan] * len(sums) if len(calls) == 1 else sums), count

    overrides = tiny_overrides(
        photo_dir, tmp_path / "run", f"data.val={val_dir}", "train.epochs=10", "train.max_steps=4",
        "train.val_every=2", "train.val_metrics=[psnr,lpips]", "train.best_by=lpips",
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "validate", first_nan)
        run = train(load_config("demo", overrides))
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "NaN" in r.getMessage()]
    assert len(warned) == 1 and "step 2" in warned[0] and "lpips" in warned[0] and "best.pt" in warned[0]
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["step"] == 4 and math.isfinite(best["best_value"])
