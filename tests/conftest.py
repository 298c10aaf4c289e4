"""Shared fixtures: small real photos and the overrides that make a
training run tiny (a few seconds on two cores)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

# One thread a pytest-xdist worker (`make test` runs one a core): the tests'
# tiny tensors gain little from a second thread, and two workers keep both
# cores busy through what is not torch (imports, files, subprocesses).
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, os.cpu_count() or 1))


def skimage_photo(name: str) -> np.ndarray:
    import skimage.data

    return getattr(skimage.data, name)()


MEMORY_PROBES: dict[str, dict] = {}  # inference/tiles.py's "memory ..." cache entries the tests measured so far


@pytest.fixture(autouse=True)
def tile_pad_cache(tmp_path_factory, monkeypatch, request):
    """Each test its own $XDG_CACHE_HOME, where `srgan upscale` caches the
    tile pads it measures (inference/tile_pad.py): never the user's cache,
    and no test sees another's pads. The memory a network's tiles take
    (inference/tiles.py's probe, keyed by its shapes and runtime, never by
    its weights) is handed from test to test, as one user's cache holds it:
    measured once a network, not once a test. A test marked own_cache
    starts from an empty cache."""
    folder = tmp_path_factory.mktemp("xdg_cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    path = folder / "srgan" / "tile_pads.json"
    shared = request.node.get_closest_marker("own_cache") is None
    if shared and MEMORY_PROBES:
        from srgan.inference.tile_pad import write_cache

        write_cache(path, dict(MEMORY_PROBES))
    yield path
    if shared and path.is_file() and not path.is_symlink():
        from srgan.inference.tile_pad import read_cache

        MEMORY_PROBES.update({k: v for k, v in read_cache(path).items() if k.startswith("memory ")})


@pytest.fixture(scope="session")
def photo_dir(tmp_path_factory) -> Path:
    """A folder of real photos, cut small: 3 training images in two formats
    and a subfolder (the dataset searches recursively)."""
    root = tmp_path_factory.mktemp("photos")
    (root / "nested").mkdir()
    Image.fromarray(skimage_photo("astronaut")[100:228, 150:278]).save(root / "astronaut.png")
    Image.fromarray(skimage_photo("coffee")[50:178, 200:328]).save(root / "coffee.jpg", quality=95)
    Image.fromarray(skimage_photo("chelsea")[60:188, 150:278]).save(root / "nested" / "chelsea.png")
    return root


@pytest.fixture(scope="session")
def val_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("val")
    Image.fromarray(skimage_photo("immunohistochemistry")[:96, :96]).save(root / "ihc.png")
    return root


def tiny_overrides(train_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    """--set values for a run of a couple of seconds."""
    values = [
        f"data.train={train_dir}",
        "data.val=null",
        "model.blocks=1",
        "model.channels=8",
        "model.d_channels=8",
        "data.crop_size=32",
        "data.batch_size=3",
        "data.workers=0",
        "data.repeat=2",
        "loss.perceptual.weights=none",
        "loss.perceptual.layer=relu1_2",
        "train.epochs=1",
        "train.max_steps=2",
        "train.pretrain_steps=0",
        "train.precision=fp32",
        "train.device=cpu",
        "train.log_every=1",
        "train.checkpoint_every=1",
        "train.curves=false",  # drawn in test_train.py; elsewhere a second a run
        f"train.run_dir={run_dir}",
    ]
    return pin_micro_batch(values + list(extra))


def pin_micro_batch(values: list[str]) -> list[str]:
    """`values` with train.micro_batch pinned to the whole batch where they
    leave it auto: the plan's trial steps (training/micro_batch.py, tested in
    test_micro_batch.py) would cost every other run a second or so. Values
    that name the micro-batch or train.accumulate keep theirs."""
    if any(v.startswith(("train.micro_batch=", "train.accumulate=")) for v in values):
        return values
    batch = [v.split("=", 1)[1] for v in values if v.startswith("data.batch_size=")][-1]
    return [*values, f"train.micro_batch={batch}"]


def run_process(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m srgan.cli ARGS` in a fresh process, as a user runs it."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "srgan.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`srgan ARGS` through the same main() in this process (no interpreter
    and torch start-up per call): its exit status and what it printed. An
    exception escaping main() would be a traceback for the user: it fails
    the test. Signals, exit codes of a real process and memory limits use
    run_process."""
    import contextlib
    import io

    from srgan.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def bare_checkpoint(path: Path, generator: torch.nn.Module | None = None) -> Path:
    """A checkpoint holding only a generator (x4, 1 block, 8 channels; fresh
    weights unless given), as upscale, evaluate and compare read it."""
    from srgan.models import Generator, save_checkpoint

    save_checkpoint(
        path,
        {
            "generator": (generator or Generator(4, 1, 8)).state_dict(),
            "discriminator": {},
            "optimizer_g": {},
            "optimizer_d": {},
            "epoch": 0,
            "step": 0,
            "config": {"model": {"scale": 4, "blocks": 1, "channels": 8}},
        },
    )
    return path


def set_args(overrides: list[str]) -> list[str]:
    return [arg for value in overrides for arg in ("--set", value)]


# ---- hostile-input helpers (tests/hostile) ----------------------------------------


@pytest.fixture
def srgan():
    """`srgan ARGS` in this process: see run_cli."""
    return run_cli


def assert_refused(result, culprit: str, code: int = 2) -> None:
    """Exit `code`, no traceback, and the last line of stderr names `culprit`."""
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr and "\x1b[" not in result.stderr, result
    last = result.stderr.strip().splitlines()[-1]
    assert culprit in last, result


def snapshot(folder: Path) -> dict[Path, bytes]:
    """The bytes of every file below `folder`."""
    return {p: p.read_bytes() for p in Path(folder).rglob("*") if p.is_file() and not p.is_symlink()}


def assert_unchanged(before: dict[Path, bytes]) -> None:
    """Every file that existed is still there, byte for byte."""
    for path, data in before.items():
        assert path.is_file(), f"{path} is gone"
        assert path.read_bytes() == data, f"{path} changed"


def no_temporary_files(folder: Path) -> list[Path]:
    return [p for p in Path(folder).rglob(".*.tmp")]


@pytest.fixture(scope="session")
def tiny_run(photo_dir, val_dir, tmp_path_factory) -> Path:
    """A finished 2-step run with validation (trained in this process)."""
    from srgan.configs import load_config
    from srgan.training import train

    run_dir = tmp_path_factory.mktemp("tiny_run") / "run"
    return train(load_config("demo", tiny_overrides(photo_dir, run_dir, f"data.val={val_dir}")))


class StopAtStep:
    """A signal as StopSignals records it, arriving during step `step`."""

    def __init__(self, trainer, step: int):
        self.trainer, self.step = trainer, step

    @property
    def signum(self):
        import signal

        return signal.SIGINT if self.trainer.progress.step >= self.step else None


def interrupt_at(config, step: int) -> Path:
    """Train `config` in this process as if Ctrl-C came during step `step`
    (the run saves and stops there); returns the run folder."""
    from srgan.training import TrainingInterrupted
    from srgan.training.loop import Trainer

    trainer = Trainer(config)
    with pytest.raises(TrainingInterrupted):
        try:
            trainer.fit(StopAtStep(trainer, step))
        finally:
            trainer.close()
    from srgan.training.state import load_checkpoint

    assert load_checkpoint(trainer.folder.path)["step"] == step
    return trainer.folder.path


def loss_without_vgg(**weights: float):
    """A LossConfig whose perceptual term would use random VGG16 features
    (never downloaded) and whose weights are the defaults but for `weights`."""
    from srgan.configs.schema import LossConfig, PerceptualConfig

    loss = LossConfig(perceptual=PerceptualConfig("vgg16", "relu1_2", "none"))
    for name, value in weights.items():
        setattr(loss.weights, name, value)
    return loss


def step_parts(generator, discriminator, loss, d_loss="bce", optimizer=None, channels_last=True, **settings):
    """The TrainingParts of one CPU fp32 step of these networks on `loss`'s
    criterion: Adam at 1e-3 unless `optimizer` (module -> optimizer) is given;
    `settings`: TrainingParts' other fields (update, ema, r1, grad_clip, ...)."""
    from srgan.losses import GeneratorCriterion
    from srgan.models import resolve_runtime
    from srgan.training import TrainingParts

    def make(module):
        return optimizer(module) if optimizer else torch.optim.Adam(module.parameters(), 1e-3)

    return TrainingParts(
        generator=generator,
        discriminator=discriminator,
        criterion=GeneratorCriterion(loss, d_loss),
        optimizer_g=make(generator),
        optimizer_d=make(discriminator),
        scaler=torch.amp.GradScaler("cpu", enabled=False),
        runtime=resolve_runtime("cpu", "fp32", channels_last),
        d_loss=d_loss,
        **{"update": "retain_graph", **settings},
    )
