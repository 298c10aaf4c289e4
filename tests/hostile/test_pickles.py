"""A malicious pickle (its __reduce__ would create a file) runs on no path
that loads a torch file, and the refusal is a whole sentence."""

from __future__ import annotations

import shutil

import pytest
import torch
from PIL import Image

from conftest import assert_refused, set_args, skimage_photo, tiny_overrides


class Planted:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))  # creates the marker file when unpickled


@pytest.fixture
def evil(tmp_path):
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    torch.save({"generator": Planted(marker), "config": {"model": {"scale": 4}}, "step": 1}, path)
    weights = tmp_path / "evil_vgg.pth"
    torch.save({"features.0.weight": Planted(marker)}, weights)
    return path, weights, marker


def refused_whole(result):
    assert_refused(result, "refused: loading it would run Python code")
    last = result.stderr.strip().splitlines()[-1]
    assert "GLOBAL" in last and last.endswith(("from a checkpoint", "from a VGG state dict")), last


def test_no_loading_path_runs_a_planted_pickle(srgan, evil, photo_dir, tmp_path, tiny_run, monkeypatch):
    path, weights, marker = evil
    image = tmp_path / "p.png"
    Image.fromarray(skimage_photo("coffee")[:48, :48]).save(image)
    refused_whole(srgan("upscale", image, "-k", path))
    refused_whole(srgan("evaluate", photo_dir, "-k", path))
    refused_whole(srgan("compare", path, image, "-o", tmp_path / "c.png"))
    refused_whole(srgan("bench", "upscale", "-k", path, "--iters", "1", "--no-baseline"))
    refused_whole(srgan("train", *set_args(tiny_overrides(photo_dir, tmp_path / "a", f"model.init_from={path}"))))
    refused_whole(
        srgan(
            "train",
            *set_args(
                tiny_overrides(
                    photo_dir, tmp_path / "b", "loss.weights.perceptual=0.1", f"loss.perceptual.weights={weights}"
                )
            ),
        )
    )
    # the resumed checkpoint
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    shutil.copyfile(path, run / "checkpoints" / "last.pt")
    refused_whole(srgan("train", "--resume", run))
    # the ImageNet weights in torch.hub's cache (torch.hub itself would unpickle them unsafely)
    hub = tmp_path / "hub"
    (hub / "checkpoints").mkdir(parents=True)
    shutil.copyfile(weights, hub / "checkpoints" / "vgg16-397923af.pth")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # torch.hub.get_dir() is then tmp_path/hub
    assert torch.hub.get_dir() == str(hub)
    refused_whole(
        srgan(
            "train",
            *set_args(
                tiny_overrides(
                    photo_dir, tmp_path / "c", "loss.weights.perceptual=0.1", "loss.perceptual.weights=imagenet"
                )
            ),
        )
    )
    assert not marker.exists()
