"""LPIPS (Zhang et al. 2018) and DISTS (Ding et al. 2020): distances between
deep features of two images, which follow human judgements of texture and
sharpness where PSNR and SSIM reward the blur of an average. Lower is better.

The packages of the `metrics` extra compute both, on RGB in [0, 1]
as their authors define them, on the whole image (no border shaved, no
resize): `lpips` is the authors' package (AlexNet, the default, or VGG16;
their linear layers ship inside it; it takes [-1, 1], and `normalize=True`
maps [0, 1] onto that), DISTS is torchmetrics' port of the authors' code
(VGG16; its alpha/beta ship inside it; it takes [0, 1] and normalises for
ImageNet itself). docs/metrics.md says why these two.

The ImageNet backbones are torchvision's files in its hub cache
(TORCH_HOME/hub/checkpoints), downloaded there on first use when the
machine is online. Without them srgan refuses a metric before any work: a
distance between random features is a wrong number, not a degraded one.
It refuses likewise a file whose backbone weights are not all finite. A
file whose sha256 does not begin with the 8 hex digits torchvision puts in
its name (alexnet-owt-7be5be79.pth) is not torchvision's: srgan still uses
it (tests plant random weights), and every report of its scores calls it
unverified (the metric's `warning`). A process hashes each file once."""

from __future__ import annotations

import contextlib
import hashlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from srgan.files import read_torch_file
from srgan.files.errors import SrganError, first_line

# metric -> the torchvision ImageNet network its features come from
BACKBONES = {"lpips": "alexnet", "lpips_vgg": "vgg16", "dists": "vgg16"}


def backbone_file(network: str) -> tuple[Path, str]:
    """Where torchvision keeps `network`'s ImageNet weights, and their URL."""
    import torchvision  # loads only when a learned metric is scored, not with srgan.metrics

    weights = {
        "alexnet": torchvision.models.AlexNet_Weights.IMAGENET1K_V1,  # alexnet-owt-7be5be79.pth
        "vgg16": torchvision.models.VGG16_Weights.IMAGENET1K_V1,  # vgg16-397923af.pth
    }[network]
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url), weights.url


def _fetch_backbone(metric: str, key: str) -> None:
    """Make sure the backbone file is in the cache: a download when it is
    not (into the cache, as torchvision does), else the one-line refusal."""
    network = BACKBONES[metric]
    cached, url = backbone_file(network)
    if cached.is_file():
        return
    try:  # into the cache, under the name torchvision reads, checked against the hash in that name
        cached.parent.mkdir(parents=True, exist_ok=True)
        digest = torch.hub.HASH_REGEX.search(cached.name)
        torch.hub.download_url_to_file(url, str(cached), digest.group(1) if digest else None, progress=False)
    except Exception as error:  # offline, a proxy, a bad hash: all mean the same here
        raise SrganError(
            f"{key}: {metric} needs torchvision's ImageNet {network} weights, {cached.name}, in {cached.parent}: "
            f"not there and not downloadable ({first_line(error)}); put the file there (from {url}), "
            f"or leave {metric} out"
        ) from None


@dataclass(frozen=True)
class WeightsCheck:
    """A backbone file against the hash prefix in its name."""

    file: Path
    sha256: str
    name_says: str | None  # the 8 hex digits of torchvision's name; None: the name carries none
    matches: bool

    def as_json(self, metric: str) -> dict:
        return {"metric": metric, "file": str(self.file), "sha256": self.sha256, "name_says": self.name_says,
                "matches": self.matches}  # fmt: skip


# (resolved path, size, mtime) -> sha256: a process hashes each file once (the VGG16 file is hundreds of MB)
DIGESTS: dict[tuple[Path, int, int], str] = {}


def weights_check(path: Path) -> WeightsCheck:
    """The file's sha256 (hashed once a process) against the prefix its name carries."""
    stat = path.stat()
    key = (path.resolve(), stat.st_size, stat.st_mtime_ns)
    if key not in DIGESTS:
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            while chunk := file.read(1 << 20):
                digest.update(chunk)
        DIGESTS[key] = digest.hexdigest()
    found = torch.hub.HASH_REGEX.search(path.name)
    name_says = found.group(1) if found else None
    return WeightsCheck(path, DIGESTS[key], name_says, bool(name_says) and DIGESTS[key].startswith(name_says or "-"))


def _check_finite_backbone(path: Path, metric: str, key: str) -> None:
    """Refuse a backbone file whose features (the only tensors LPIPS and
    DISTS use) hold NaN or Inf: every score would be NaN, every best.pt
    comparison false."""
    state = read_torch_file(path, "backbone weights file")
    if not isinstance(state, dict):
        return  # the library's loader refuses it below, in its words
    for name, tensor in state.items():
        if (
            isinstance(name, str)
            and name.startswith("features.")
            and isinstance(tensor, torch.Tensor)
            and tensor.is_floating_point()
            and not bool(torch.isfinite(tensor).all())
        ):
            raise SrganError(
                f"{key}: {metric}: {path}: {name} holds NaN or infinite values, so every {metric} score "
                "would be NaN; replace the file with torchvision's"
            )


@contextlib.contextmanager
def _safe_loads() -> Iterator[None]:
    """The libraries read the backbone with torchvision's loader, which
    unpickles with weights_only=False: force weights_only for every
    torch.load inside (tensors and plain values, never code), and keep the
    global random state as it was (the networks are built with random
    weights first), so that choosing a metric changes no training bit."""
    before = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # torchvision's notice that `pretrained=True` (the lpips package's call) is deprecated
            warnings.filterwarnings("ignore", category=UserWarning, module="torchvision")
            yield
    finally:
        if before is None:
            del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = before


def _import_extra(module: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise SrganError(
            f"the learned metrics need the metrics extra: pip install 'srgan[metrics]' (no module {module})"
        ) from None


class LearnedMetric:
    """One learned metric with its network loaded; the constructor raises
    SrganError naming what is missing. `distance(sr8, hr8)` scores two
    3xHxW uint8 images."""

    def __init__(self, name: str, device: torch.device, key: str):
        if name not in BACKBONES:
            raise ValueError(name)
        self.name = name
        if name in ("lpips", "lpips_vgg"):
            lpips = _import_extra("lpips")
        else:
            dists = _import_extra("torchmetrics.functional.image.dists")
        _fetch_backbone(name, key)
        cached, _ = backbone_file(BACKBONES[name])
        self.weights = weights_check(cached)
        self.warning: str | None = None  # every report of this metric's scores says it
        if not self.weights.matches:
            self.warning = (
                f"{name}: {cached.name} is not torchvision's file (its sha256 begins "
                f"{self.weights.sha256[:8]}, its name says {self.weights.name_says}): unverified "
                f"{BACKBONES[name]} weights, scores not comparable with published ones"
            )
        _check_finite_backbone(cached, name, key)
        try:
            with _safe_loads():
                if name in ("lpips", "lpips_vgg"):
                    network: nn.Module = lpips.LPIPS(net="alex" if name == "lpips" else "vgg", verbose=False)
                else:
                    network = dists.DISTSNetwork()
        except Exception as error:  # a damaged or foreign file in the cache
            raise SrganError(
                f"{key}: {name}: {cached} cannot be read as torchvision's {BACKBONES[name]} weights "
                f"({first_line(error)}); replace it with torchvision's file"
            ) from None
        self.network = network.to(device).eval().requires_grad_(False)
        self.device = device

    @torch.inference_mode()
    def distance(self, sr8: torch.Tensor, hr8: torch.Tensor) -> float:
        sr = sr8.to(self.device, torch.float32)[None] / 255
        hr = hr8.to(self.device, torch.float32)[None] / 255
        if self.name == "dists":
            return float(self.network(sr, hr))  # DISTS takes [0, 1]
        return float(self.network(sr, hr, normalize=True))  # LPIPS takes [-1, 1]: normalize maps [0, 1] onto it
