"""model.arch: rrdb (ESRGAN's RRDBNet) and compact (Real-ESRGAN's
SRVGGNetCompact) beside srresnet: their shapes and receptive radii, the
keys a config may name with each, and every command with each (train with
EMA, resume to the bit, upscale by tiles, evaluate, compare, video,
sweeps, `srgan runs`). Tiny networks: rrdb 1 block x 8 channels, growth 4;
compact 2 convs x 8 channels. DDP with each: tests/test_distributed.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from conftest import assert_refused, set_args, skimage_photo, tiny_overrides
from srgan.configs import config_from_dict, config_to_dict, load_config
from srgan.files.errors import SrganError
from srgan.models import build_generator
from srgan.models.checkpoint import load_generator
from srgan.models.compact import SRVGGNetCompact
from srgan.models.rrdb import RRDBNet
from srgan.training import train
from srgan.training.state import load_checkpoint

TINY = {"rrdb": ["model.arch=rrdb", "model.growth=4"], "compact": ["model.arch=compact", "model.blocks=2"]}
CLASSES = {"rrdb": RRDBNet, "compact": SRVGGNetCompact}


# ---- the networks --------------------------------------------------------------


@pytest.mark.parametrize(
    "arch, scale",
    [
        ("rrdb", 1),
        ("rrdb", 2),
        ("rrdb", 4),
        ("compact", 1),
        ("compact", 2),
        ("compact", 3),
        ("compact", 4),
        ("compact", 8),
    ],
)
def test_any_input_size_gives_scale_times_the_size(arch, scale):
    """Odd sides too: rrdb x1/x2 pad their input to the unshuffle factor and cut the padding's output off."""
    model = load_config(
        "demo",
        [f"model.arch={arch}", f"model.scale={scale}", "model.blocks=1", "model.channels=8", "data.crop_size=48"],
    ).model
    g = build_generator(model).eval()
    assert type(g) is CLASSES[arch] and g.scale == scale
    for height, width in ((13, 17), (1, 2), (16, 8)):
        with torch.no_grad():
            assert g(torch.rand(1, 3, height, width)).shape == (1, 3, height * scale, width * scale)


def dependency_reach(g: torch.nn.Module, size: int, offset: int) -> int:
    """How far (in input pixels, along the centre row) the inputs lie that the
    output pixels of input pixel (c, c + offset) depend on: the non-zero
    gradient, in float64 (LeakyReLU and PReLU never zero it)."""
    c = size // 2 // 4 * 4  # on a pixel-unshuffle group's start
    x = torch.rand(1, 3, size, size, dtype=torch.float64, requires_grad=True)
    s = g.scale
    out = g(x)[0, :, c * s : (c + 1) * s, (c + offset) * s : (c + offset + 1) * s]
    (grad,) = torch.autograd.grad(out.sum(), x)
    columns = grad[0].abs().sum(dim=(0, 1)).nonzero().flatten()
    return int(max(c + offset - columns.min(), columns.max() - (c + offset)))


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_rrdb_receptive_radius_is_exact(scale):
    torch.manual_seed(0)
    g = RRDBNet(scale, blocks=1, channels=4, growth=2).double().eval()
    r = g.receptive_radius
    assert max(dependency_reach(g, 2 * r + 16, offset) for offset in range(g.unshuffle)) == r


def test_compact_receptive_radius_is_exact():
    torch.manual_seed(0)
    g = SRVGGNetCompact(3, convs=2, channels=4).double().eval()
    assert g.receptive_radius == 4 and dependency_reach(g, 24, 0) == 4


def test_a_deep_compact_stack_passes_gradient_to_its_first_layer():
    """34 plain convs: with PyTorch's default conv init the first layer's
    gradient is ~1e-20 of the last's; from srgan's start it is of the order
    of the last layer's."""
    torch.manual_seed(0)
    network = SRVGGNetCompact(scale=4, convs=32, channels=16)
    x, target = torch.rand(2, 3, 12, 12), torch.rand(2, 3, 48, 48)
    torch.nn.functional.l1_loss(network(x), target).backward()
    first, last = network.body[0].weight.grad.norm(), network.body[-1].weight.grad.norm()
    assert first > 1e-3 * last > 0
    # and the network starts near the nearest-neighbour upscale it adds to
    nearest = torch.nn.functional.interpolate(x, scale_factor=4, mode="nearest")
    assert 0 < (network(x) - nearest).abs().mean() < 0.2


def test_a_deep_compact_stack_learns_from_its_first_steps():
    """32 convs on random photo crops, L1, Adam at lr 5e-4. From He-random
    middle convs the stack's signal collapsed within 50 steps and the network
    stayed at nearest-neighbour quality (26.68 dB here at step 100, the
    first layer's gradient 2e-6); from the identity start it learns (26.88
    dB, first layer's gradient 8e-3)."""
    import torch.nn.functional as F

    photos = [torch.from_numpy(skimage_photo(n)).permute(2, 0, 1).float() / 255 for n in ("astronaut", "coffee")]
    held_out = torch.from_numpy(skimage_photo("chelsea")[:128, :128]).permute(2, 0, 1).float()[None] / 255
    generator = torch.Generator().manual_seed(0)

    def bicubic_pair(hr):
        return F.interpolate(hr, scale_factor=0.25, mode="bicubic", antialias=True).clamp(0, 1), hr

    def crops(count=8, size=64):
        out = []
        for _ in range(count):
            photo = photos[int(torch.randint(len(photos), (1,), generator=generator))]
            y, x = (int(torch.randint(n - size, (1,), generator=generator)) for n in photo.shape[1:])
            out.append(photo[:, y : y + size, x : x + size])
        return bicubic_pair(torch.stack(out))

    def psnr(lr, hr):
        with torch.no_grad():
            return -10 * torch.log10(F.mse_loss(network(lr).clamp(0, 1), hr)).item()

    torch.manual_seed(0)
    network = SRVGGNetCompact(scale=4, convs=32, channels=32)
    optimizer = torch.optim.Adam(network.parameters(), lr=5e-4, betas=(0.9, 0.99))
    val_lr, val_hr = bicubic_pair(held_out)
    nearest = -10 * torch.log10(F.mse_loss(F.interpolate(val_lr, scale_factor=4), val_hr)).item()
    for _ in range(100):
        lr, hr = crops()
        optimizer.zero_grad()
        F.l1_loss(network(lr), hr).backward()
        optimizer.step()
    assert network.body[0].weight.grad.norm() > 1e-4
    assert psnr(val_lr, val_hr) > nearest + 0.1


@pytest.mark.parametrize("scale, blocks, channels, growth", [(4, 23, 64, 32), (2, 2, 16, 8), (1, 1, 8, 4)])
def test_the_loaders_rrdb_size_is_the_networks(scale, blocks, channels, growth):
    """The limit on an rrdb's size is checked before building it, on a count
    of its weights: that count is the built network's (ESRGAN's: 16,697,987)."""
    from srgan.configs.networks import generator_parameters

    with torch.device("meta"):
        g = RRDBNet(scale, blocks, channels, growth)
    assert generator_parameters("rrdb", scale, blocks, channels, growth) == sum(p.numel() for p in g.parameters())
    if (scale, blocks, channels, growth) == (4, 23, 64, 32):
        assert sum(p.numel() for p in g.parameters()) == 16_697_987


def test_rrdb_tiles_start_on_unshuffle_groups_and_match_the_whole_image():
    """x1 groups 4x4 input pixels: with tiles aligned to the groups and a pad
    of the receptive radius (76), tiled equals whole; tiles that start
    anywhere group other pixels, and differ."""
    from srgan.inference.tile_grid import paste_tiles, tile_grid
    from srgan.inference.tiles import upscale_tiled
    from srgan.models import Runtime

    torch.manual_seed(0)
    g = RRDBNet(1, blocks=1, channels=4, growth=2).eval()
    with torch.no_grad():  # a trained-looking body (the dense blocks start near zero)
        for p in g.body.parameters():
            p.normal_(0, 0.3)
    height, width = 230, 250
    lr = torch.from_numpy(skimage_photo("astronaut")[100 : 100 + height, 150 : 150 + width].copy()).permute(2, 0, 1)
    lr = lr.float() / 255
    pad = g.receptive_radius
    grid = tile_grid(height, width, 50, pad, g.tile_align)
    assert len(grid) == 25
    assert all(t.top % 4 == t.left % 4 == t.context_top % 4 == t.context_left % 4 == 0 for t in grid)
    cpu = Runtime(torch.device("cpu"), "fp32")
    whole, tiled, misaligned = (np.empty((height, width, 3), np.float32) for _ in range(3))
    upscale_tiled(g, lr, cpu, whole, 0, 0)
    upscale_tiled(g, lr, cpu, tiled, 50, pad)
    assert np.abs(tiled - whole).max() < 1e-5
    with torch.inference_mode():
        paste_tiles(g, lr, cpu, misaligned, tile_grid(height, width, 50, pad), None)
    assert np.abs(misaligned - whole).max() > 1e-3  # the test can fail: alignment matters


# ---- the keys a config names ---------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, culprit",
    [
        (["model.growth=16"], "model.growth: applies to model.arch rrdb only, not srresnet"),
        (["model.arch=compact", "model.growth=16"], "model.growth: applies to model.arch rrdb only, not compact"),
        (["model.arch=rrdb", "model.norm=none"], "model.norm: applies to model.arch srresnet only, not rrdb"),
        (["model.arch=compact", "model.icnr=true"], "model.icnr: applies to model.arch srresnet only"),
        (["model.arch=rrdb", "model.scale=8"], "model.scale: expected 1, 2 or 4 with model.arch rrdb, got 8"),
        (["model.arch=rrdb", "model.scale=3"], "model.scale: expected 1, 2 or 4 with model.arch rrdb, got 3"),
        (["model.scale=1"], "model.scale: expected 2, 3, 4 or 8 with model.arch srresnet, got 1"),
        (["model.arch=rrdb", "model.growth=0"], "model.growth: expected at least 1"),
        (["model.arch=rrdb", "model.blocks=128", "model.channels=512"], "model: an rrdb of 128 blocks x 512 channels"),
    ],
)
def test_set_naming_a_key_of_another_arch_is_refused(srgan, overrides, culprit):
    assert_refused(srgan("config", "show", "demo", *set_args(overrides)), culprit)


def test_a_yaml_naming_a_key_of_another_arch_is_refused_naming_the_file(srgan, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  arch: rrdb\n  norm: batch\n")  # batch is srresnet's default: named, so refused
    assert_refused(srgan("config", "show", str(path)), f"{path}: model.norm: applies to model.arch srresnet")
    path.write_text("model:\n  growth: 32\n")  # rrdb's default, with the default arch
    assert_refused(srgan("config", "show", str(path)), "model.growth: applies to model.arch rrdb only")


def test_switching_arch_with_set_drops_the_presets_keys_of_another_arch():
    """demo names norm, residual, res_scale, icnr (srresnet's): --set
    model.arch=rrdb makes them moot, not mistakes; the other keys stay."""
    c = load_config("demo", ["model.arch=rrdb", "model.growth=8"])
    assert (c.model.arch, c.model.blocks, c.model.channels, c.model.growth) == ("rrdb", 4, 32, 8)
    assert load_config("compact_x4").model.blocks == 32
    assert load_config("compact_x4", ["model.arch=srresnet"]).model.norm == "batch"


def test_the_compact_preset_is_real_esrgans_l1_stage_on_general_x4v3s_network():
    c = load_config("compact_x4")
    assert (c.model.arch, c.model.scale, c.model.blocks, c.model.channels) == ("compact", 4, 32, 64)
    assert (c.loss.image, c.loss.weights.image, c.loss.weights.adversarial, c.loss.weights.perceptual) == (
        "l1",
        1.0,
        0.0,
        0.0,
    )
    assert (c.train.lr_g, c.train.betas, c.train.ema_decay, c.train.max_steps) == (2e-4, [0.9, 0.99], 0.999, 1_000_000)
    assert (c.data.crop_size, c.data.batch_size) == (256, 12)
    assert sum(p.numel() for p in build_generator(c.model).parameters()) == 1_213_296


@pytest.mark.parametrize("arch", ["srresnet", "rrdb", "compact"])
def test_a_written_config_holds_its_archs_keys_only_and_loads_again(arch, tmp_path):
    """The dict a run folder and a checkpoint keep (config_to_dict) reloads,
    as a dict and as the YAML file `srgan config show` prints."""
    c = load_config("demo", [f"model.arch={arch}"])
    written = config_to_dict(c)
    assert ("growth" in written["model"]) == (arch == "rrdb")
    assert ("norm" in written["model"]) == (arch == "srresnet")
    assert config_from_dict(written) == c
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(written))
    assert load_config(str(path)).model == c.model


def test_a_checkpoint_of_before_arch_loads_as_srresnet():
    """Configs saved before model.arch existed hold norm etc. and no arch."""
    old = config_to_dict(load_config("demo"))
    del old["model"]["arch"]
    assert config_from_dict(old, "old checkpoint").model.arch == "srresnet"


# ---- every command, with each arch -------------------------------------------------


def arch_config(arch, photo_dir, val_dir, run_dir, max_steps, *extra):
    """Epochs of 2 steps: generator-only pretraining, then GAN steps, EMA and
    a milestone, so that resume must bring every state back."""
    return load_config(
        "demo",
        tiny_overrides(
            photo_dir,
            run_dir,
            f"data.val={val_dir}",
            "train.epochs=10",
            f"train.max_steps={max_steps}",
            "train.pretrain_steps=2",
            "train.ema_decay=0.5",
            "train.lr_schedule.milestones=[3]",
            *TINY[arch],
            *extra,
        ),
    )


@pytest.fixture(scope="module", params=["rrdb", "compact"])
def arch_run(request, photo_dir, val_dir, tmp_path_factory):
    """A 4-step run of each arch."""
    arch = request.param
    folder = tmp_path_factory.mktemp(arch)
    return arch, train(arch_config(arch, photo_dir, val_dir, folder / "whole", 4))


def test_the_run_keeps_the_arch_and_resumes_to_the_bit(arch_run, photo_dir, val_dir, tmp_path):
    from test_reproducibility import assert_same_checkpoints

    arch, whole = arch_run
    state = load_checkpoint(whole)
    assert state["config"]["model"]["arch"] == arch and state["generator_ema"] is not None
    assert type(load_generator(whole)) is CLASSES[arch]
    assert yaml.safe_load((whole / "config.yaml").read_text())["model"]["arch"] == arch
    # stopped after 3 steps, continued to 4: the same bits as the run never stopped
    part = train(arch_config(arch, photo_dir, val_dir, tmp_path / "part", 3))
    train(arch_config(arch, photo_dir, val_dir, part, 4), resume=part)
    assert_same_checkpoints(whole, part)


def test_resume_refuses_another_arch(arch_run):
    arch, whole = arch_run
    other = "compact" if arch == "rrdb" else "rrdb"
    changed = load_config(str(whole / "config.yaml"), [f"model.arch={other}"])
    with pytest.raises(SrganError, match=rf"model\.arch '{arch}' -> '{other}'"):
        train(changed, resume=whole)


def test_upscale_by_tiles_evaluate_and_compare(arch_run, srgan, val_dir, tmp_path):
    arch, whole = arch_run
    photo = tmp_path / "photo.png"
    Image.fromarray(skimage_photo("chelsea")[:45, :61]).save(photo)
    cpu = ("--device", "cpu", "--precision", "fp32")
    tiled, full = tmp_path / "tiled.png", tmp_path / "whole.png"
    assert srgan("upscale", photo, "-k", whole, "-o", tiled, "--tile", "16", *cpu).returncode == 0
    assert srgan("upscale", photo, "-k", whole, "-o", full, "--tile", "0", *cpu).returncode == 0
    a, b = np.asarray(Image.open(tiled)).astype(int), np.asarray(Image.open(full)).astype(int)
    assert a.shape == (180, 244, 3)
    # every arch: the pad measured on the run's weights (rrdb's far below its radius) leaves no visible seam
    assert np.abs(a - b).max() <= 1
    result = srgan("evaluate", val_dir, "-k", whole, "--json", tmp_path / "scores.json", *cpu)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "scores.json").read_text())["images"][0]["sr"]["psnr"] > 0
    result = srgan("compare", whole, val_dir / "ihc.png", "-o", tmp_path / "side.png", *cpu)
    assert result.returncode == 0, result.stderr
    assert Image.open(tmp_path / "side.png").size[1] == 96


def test_upscale_a_video(arch_run, srgan, tmp_path):
    pytest.importorskip("av")
    from test_video import decode, make_clip

    _, whole = arch_run
    clip = make_clip(tmp_path / "clip.mp4", frames=3, sound=False)
    result = srgan("upscale", clip, "-k", whole, "--device", "cpu", "--precision", "fp32")
    assert result.returncode == 0, result.stderr
    frames, _ = decode(tmp_path / "clip_x4.mp4")
    assert len(frames) == 3 and frames[0].shape == (192, 256, 3)


def test_runs_lists_the_arch(arch_run, srgan):
    arch, whole = arch_run
    result = srgan("runs", whole.parent, "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["changes"]["model.arch"] == arch and row["changes"]["model.channels"] == 8  # against its preset, demo


def test_a_sweep_over_the_three_archs(srgan, photo_dir, tmp_path):
    """From the srresnet demo preset: each variant runs its own arch."""
    overrides = tiny_overrides(photo_dir, tmp_path / "sweep", "train.max_steps=1")
    result = srgan("train", "--config", "demo", *set_args(overrides), "--sweep", "model.arch=srresnet,rrdb,compact")
    assert result.returncode == 0, result.stderr
    archs = sorted(type(load_generator(run)).__name__ for run in (tmp_path / "sweep").iterdir() if run.is_dir())
    assert archs == ["Generator", "RRDBNet", "SRVGGNetCompact"]


def test_the_tiling_measurement_finds_seams_below_the_radius_and_none_at_it():
    """bench/tiling.py, the figures behind docs/tiling.md: an interior tile
    with the receptive radius as pad is the whole image's output (fp32
    rounding apart); without context it is not."""
    from srgan.bench.tiling import photo_lr, seam_table, smallest_pad

    torch.manual_seed(0)
    g = RRDBNet(2, blocks=1, channels=8, growth=4)
    r = g.receptive_radius
    rows = seam_table(g, photo_lr(2 * r + 24, 2), 8, [0, r])
    assert rows[0]["max_diff_8bit"] > 1 and rows[0]["changed_pixels"] > 0
    assert rows[1]["max_diff_8bit"] < 0.01 and rows[1]["changed_pixels"] == 0
    assert smallest_pad(rows) == r
    assert (
        smallest_pad(
            [{"pad": 2, "max_diff_8bit": 0.5}, {"pad": 4, "max_diff_8bit": 1.5}, {"pad": 8, "max_diff_8bit": 0.2}]
        )
        == 8
    )  # below from 8 on, not from 2
