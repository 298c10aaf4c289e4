"""--tile-pad auto: the pad measured on the network's weights
(inference/tile_pad.py), its cache, and what upscale says about it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from conftest import bare_checkpoint, skimage_photo
from srgan.inference.tile_pad import LIMIT, TilePad, cache_file, measure_tile_pad, tile_pad, weights_key
from srgan.inference.tiles import upscale_tiled
from srgan.models import Generator, Runtime
from srgan.models.rrdb import RRDBNet

pytestmark = pytest.mark.own_cache  # what a cache holds and when it measures is the subject

CPU32 = Runtime(torch.device("cpu"), "fp32", channels_last=False)


@pytest.fixture(scope="module")
def far_reaching_rrdb() -> RRDBNet:
    """A 5-block rrdb whose output still depends on input 32 pixels away, as
    long-trained ESRGANs' does (Real-ESRGAN x4plus: 7-13 levels of seam at
    pad 32). Training from ESRGAN's initialisation does not get there in a
    test's budget (200 Adam steps on a target that needs wide context left
    0.004 levels at pad 16): the reach comes from a body drawn wide
    (std 0.3), then 10 Adam steps of L1 on photo crops train it; a few
    seconds of CPU in all, once for the module."""
    torch.manual_seed(0)
    g = RRDBNet(4, blocks=5, channels=8, growth=4)
    with torch.no_grad():
        for p in g.body.parameters():
            p.normal_(0, 0.3)
    photos = [
        torch.from_numpy(skimage_photo(n).copy()).permute(2, 0, 1)[None].float() / 255 for n in ("coffee", "chelsea")
    ]
    optimizer = torch.optim.Adam(g.parameters(), 1e-3)
    rng = np.random.default_rng(0)
    for step in range(10):
        hr = photos[step % 2]
        y, x = (int(rng.integers(0, s - 128)) // 4 * 4 for s in hr.shape[2:])
        target = hr[..., y : y + 128, x : x + 128]
        loss = F.l1_loss(g(F.avg_pool2d(target, 4)), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return g.eval().requires_grad_(False)


def astronaut_lr(size: int) -> torch.Tensor:
    hr = torch.from_numpy(skimage_photo("astronaut")[:, 64 : 64 + 4 * size].copy()).permute(2, 0, 1)[None].float()
    return F.avg_pool2d(hr[..., : 4 * size, :] / 255, 4)[0]


def seam_levels(g, lr: torch.Tensor, tile: int, pad: int) -> float:
    """The largest |tiled - whole| over the image, in 8-bit levels (fp32)."""
    height, width = lr.shape[1:]
    whole, tiled = (np.empty((4 * height, 4 * width, 3), np.float32) for _ in range(2))
    upscale_tiled(g, lr, CPU32, whole, 0, 0)
    upscale_tiled(g, lr, CPU32, tiled, tile, pad)
    return float(np.abs(tiled - whole).max() * 255)


def test_the_measured_pad_leaves_no_seam_where_pad_32_does(far_reaching_rrdb):
    """On a real photo, tiles of 48 with the old rrdb default of 32 show a
    seam above one 8-bit level; with the pad the probe measured (on its own
    synthetic image) none does."""
    chosen = tile_pad(far_reaching_rrdb, CPU32)
    assert chosen.how == "measured" and chosen.seam is not None and chosen.seam <= LIMIT
    assert 32 < chosen.pad < far_reaching_rrdb.receptive_radius
    lr = astronaut_lr(120)
    assert seam_levels(far_reaching_rrdb, lr, 48, 32) > 1
    assert seam_levels(far_reaching_rrdb, lr, 48, chosen.pad) < 1


def test_the_pad_is_cached_by_the_weights_and_measured_again_for_others(far_reaching_rrdb, tile_pad_cache):
    first = tile_pad(far_reaching_rrdb, CPU32)
    assert first.how == "measured" and tile_pad_cache == cache_file() and tile_pad_cache.is_file()
    again = tile_pad(far_reaching_rrdb, CPU32)
    assert again.how == "cached" and (again.pad, again.seam) == (first.pad, first.seam)
    assert tile_pad(far_reaching_rrdb, CPU32, given=5) == TilePad(5, "given")
    other = RRDBNet(4, blocks=5, channels=8, growth=4).eval()  # ESRGAN's initialisation: a short reach
    assert weights_key(other) != weights_key(far_reaching_rrdb)
    short = tile_pad(other, CPU32)
    assert short.how == "measured" and short.pad < first.pad
    assert set(json.loads(tile_pad_cache.read_text())["pads"]) == {weights_key(other), weights_key(far_reaching_rrdb)}


@pytest.mark.parametrize("damage", [b"\x00garbage{", b'{"pads": [1, 2]}', b'{"pads": {"k": {"pad": -3}}}', "folder"])
def test_a_damaged_cache_is_ignored_and_replaced(damage, tile_pad_cache, caplog):
    g = RRDBNet(4, blocks=1, channels=8, growth=4).eval()
    tile_pad_cache.parent.mkdir(parents=True)
    if damage == "folder":
        tile_pad_cache.mkdir()
    else:
        tile_pad_cache.write_bytes(damage)
        if b"-3" in damage:  # a foreign entry under the network's own key: not taken for a pad
            tile_pad_cache.write_text(json.dumps({"pads": {weights_key(g): {"pad": -3}}}))
    chosen = tile_pad(g, CPU32)
    assert chosen.how == "measured" and chosen.pad >= 0
    if damage != "folder":
        assert json.loads(tile_pad_cache.read_text())["pads"][weights_key(g)]["pad"] == chosen.pad
        assert tile_pad(g, CPU32).how == "cached"
    else:
        assert "cannot cache" in caplog.text


def test_srresnet_and_compact_get_at_most_their_receptive_radius():
    """The radius makes tiles exact: the probe never asks for more."""
    from srgan.models.compact import SRVGGNetCompact

    for g in (Generator(4, 2, 8).eval(), SRVGGNetCompact(4, 2, 8).eval()):
        chosen = measure_tile_pad(g, CPU32)
        assert chosen.pad <= g.receptive_radius
        assert seam_levels(g, astronaut_lr(40), 16, chosen.pad) < 1


@pytest.mark.parametrize("blocks, radius", [(1, 26), (2, 50), (8, 194)])
def test_safmn_is_not_probed_its_pad_is_its_counted_radius(blocks, radius):
    """SAFMN's max pooling hides its reach from the probe (docs/tiling.md):
    its pad is 2 + 24 a block, exact tiles, up to the cap of 128."""
    from srgan.configs import load_config
    from srgan.models import build_generator

    model = load_config("demo", ["model.arch=safmn", f"model.options={{dim: 8, n_blocks: {blocks}}}"]).model
    g = build_generator(model).eval()
    assert g.receptive_radius == radius
    chosen = tile_pad(g, CPU32)  # never the cache: an older probe's entry for these weights would be stale
    assert (chosen.pad, chosen.how, chosen.exact, chosen.capped) == (
        min(radius, 128),
        "counted",
        radius <= 128,
        radius > 128,
    )
    assert chosen == measure_tile_pad(g, CPU32)
    assert not cache_file().exists() or weights_key(g) not in cache_file().read_text()  # nothing cached for it
    assert ("exact tiles" if radius <= 128 else "below the receptive radius") in chosen.describe()
    if blocks == 1:  # the counted radius covers what the network reads: tiles at it equal the whole image
        assert seam_levels(g, astronaut_lr(64), 16, radius) < 1e-3


def test_upscale_says_the_pad_measured_cached_or_given(srgan, tmp_path, tile_pad_cache):
    photo = tmp_path / "photo.png"
    Image.fromarray(skimage_photo("coffee")[100:140, 200:250]).save(photo)
    checkpoint = bare_checkpoint(tmp_path / "g.pt")
    cpu = ("--device", "cpu", "--precision", "fp32", "--force")
    lines = []
    for extra in ([], [], ["--tile-pad", "3"], ["--tile", "0"]):
        result = srgan("upscale", photo, "-k", checkpoint, "--tile", "16", *cpu, *extra)
        assert result.returncode == 0, result.stderr
        lines.append(result.stderr.splitlines()[0])
    assert all(line.startswith("model: ") for line in lines)
    assert "; tile pad " in lines[0] and "(measured in " in lines[0]
    assert lines[1].split("; ")[-1].startswith(lines[0].split("; ")[-1].split(" (")[0] + " (cached")
    assert lines[2].endswith("; tile pad 3 (given)")
    assert lines[3].endswith("; no tiles (--tile 0)")
    # a second model in the same command-line cache: read, measured, and written beside the first's
    other = bare_checkpoint(tmp_path / "other.pt", Generator(4, 1, 8))  # other fresh weights
    result = srgan("upscale", photo, "-k", other, "--tile", "16", "-o", tmp_path / "other.png", *cpu)
    assert result.returncode == 0 and "(measured in " in result.stderr and "cannot cache" not in result.stderr
    assert len(json.loads(tile_pad_cache.read_text())["pads"]) == 2
    refused = srgan("upscale", photo, "-k", checkpoint, "--tile-pad", "-1", *cpu)
    assert refused.returncode == 2 and "--tile-pad: expected auto or a number" in refused.stderr


def test_the_checkpoint_help_names_every_kind_of_file_read(srgan):
    for command in ("upscale", "evaluate", "compare"):
        text = " ".join(srgan(command, "--help").stdout.split())
        for kind in ("run folder", ".safetensors", "Real-ESRGAN", "SRVGGNetCompact", "ESRGAN's 2018", "spandrel"):
            assert kind in text, (command, kind)
        assert "netG_epoch_*.pth" not in text
