"""Network interpolation: `srgan interpolate`, `upscale --blend`, `compare --blend`,
and the PSNR-phase generator a run saves (checkpoints/pretrained.pt)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import assert_refused, run_cli, skimage_photo, tiny_overrides

CPU32 = ("--device", "cpu", "--precision", "fp32")


def own_checkpoint(path: Path, seed: int, blocks: int = 1, channels: int = 8, batches: int = 0) -> Path:
    """An srgan checkpoint of a fresh x4 SRResNet (batch norm: float running
    statistics and an integer num_batches_tracked), its weights drawn from `seed`."""
    from srgan.models import Generator, save_checkpoint

    torch.manual_seed(seed)
    generator = Generator(4, blocks, channels)
    with torch.no_grad():
        for parameter in generator.parameters():  # PReLU's slopes start at 0.25 in every network
            parameter.add_(torch.randn_like(parameter), alpha=0.01)
        for buffer in generator.buffers():
            if buffer.is_floating_point():  # running statistics unlike the fresh 0 and 1, so that they blend
                buffer.uniform_(0.5, 1.5)
            else:
                buffer.fill_(batches)
    model = {"scale": 4, "blocks": blocks, "channels": channels}
    save_checkpoint(path, {"generator": generator.state_dict(), "config": {"model": model}, "step": 0})
    return path


def weights(path: Path) -> dict[str, torch.Tensor]:
    from srgan.models.checkpoint import load_generator

    return load_generator(path).state_dict()


@pytest.fixture
def ends(tmp_path) -> tuple[Path, Path]:
    return own_checkpoint(tmp_path / "a.pt", 1, batches=5), own_checkpoint(tmp_path / "b.pt", 2, batches=9)


def test_the_blend_is_the_weighted_sum_and_integer_buffers_come_from_a(ends, tmp_path):
    a, b = ends
    out = tmp_path / "mid.safetensors"
    result = run_cli("interpolate", a, b, "--alpha", "0.3", "-o", out)
    assert result.returncode == 0, result
    got, wa, wb = weights(out), weights(a), weights(b)
    assert got.keys() == wa.keys()
    floats = 0
    for name, tensor in got.items():
        if tensor.is_floating_point():
            expected = 0.7 * wa[name] + 0.3 * wb[name]
            assert torch.equal(tensor, expected), name
            assert not torch.equal(tensor, wa[name]), name  # the blend moved every float tensor
            floats += 1
        else:  # num_batches_tracked: A's count, not a blend of 5 and 9
            assert torch.equal(tensor, wa[name]) and int(tensor) == 5, name
    assert floats > 10


def test_alpha_0_gives_a_and_1_gives_b_to_the_bit(ends, tmp_path):
    a, b = ends
    for alpha, source in (("0", a), ("1", b)):
        out = tmp_path / f"end{alpha}.safetensors"
        assert run_cli("interpolate", a, b, "--alpha", alpha, "-o", out).returncode == 0
        got, expected = weights(out), weights(source)
        for name, tensor in got.items():
            if tensor.is_floating_point():
                assert tensor.numpy().tobytes() == expected[name].numpy().tobytes(), (alpha, name)
    assert int(weights(tmp_path / "end1.safetensors")["body.0.bn1.num_batches_tracked"]) == 5  # still A's


def test_an_rrdb_blend_leaves_as_basicsr_pth_the_community_reads(tmp_path):
    from srgan.configs import config_from_dict
    from srgan.models.build import build_generator

    model = config_from_dict({"model": {"arch": "rrdb", "blocks": 1, "channels": 8, "growth": 4}}, "test").model
    files = []
    for seed in (3, 4):
        torch.manual_seed(seed)
        path = tmp_path / f"rrdb{seed}.pth"
        torch.save({"params_ema": build_generator(model).state_dict()}, path)
        files.append(path)
    out = tmp_path / "mid.pth"
    assert run_cli("interpolate", *files, "--alpha", "0.5", "-o", out).returncode == 0
    saved = torch.load(out, weights_only=True)["params_ema"]  # BasicSR's, as Real-ESRGAN loads it
    wa, wb = (torch.load(f, weights_only=True)["params_ema"] for f in files)
    assert saved.keys() == wa.keys()
    for name in saved:
        assert torch.equal(saved[name], 0.5 * wa[name] + 0.5 * wb[name]), name


def test_other_shapes_are_refused_naming_the_first_key(ends, tmp_path):
    a, _ = ends
    deeper = own_checkpoint(tmp_path / "deep.pt", 3, blocks=2)
    wider = own_checkpoint(tmp_path / "wide.pt", 3, channels=16)
    result = run_cli("interpolate", a, deeper, "-o", tmp_path / "x.safetensors")
    assert_refused(result, "has body.1.conv1.weight in excess")
    result = run_cli("interpolate", a, wider, "-o", tmp_path / "x.safetensors")
    assert_refused(result, "head.0.weight has shape [16, 3, 9, 9] there, [8, 3, 9, 9] here")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("alpha", ["-0.1", "1.5", "nan"])
def test_alpha_outside_0_to_1_is_refused(ends, tmp_path, alpha):
    a, b = ends
    assert_refused(run_cli("interpolate", a, b, "--alpha", alpha, "-o", tmp_path / "x.safetensors"), "--alpha")


def test_never_over_an_input_and_over_an_output_only_with_force(ends, tmp_path):
    a, b = ends
    shipped = tmp_path / "b.safetensors"  # an input srgan could also write
    assert run_cli("interpolate", a, b, "--alpha", "1", "-o", shipped).returncode == 0
    before = a.read_bytes(), shipped.read_bytes()
    assert_refused(run_cli("interpolate", a, shipped, "-o", shipped, "--force"), "is an input")
    b = shipped
    assert_refused(run_cli("interpolate", shipped, a, "-o", shipped, "--force"), "is an input")
    (tmp_path / "old.safetensors").write_bytes(b"old")
    assert_refused(run_cli("interpolate", a, b, "-o", tmp_path / "old.safetensors"), "exists")
    assert (tmp_path / "old.safetensors").read_bytes() == b"old"
    assert run_cli("interpolate", a, b, "-o", tmp_path / "old.safetensors", "--force").returncode == 0
    assert (a.read_bytes(), b.read_bytes()) == before
    assert_refused(run_cli("interpolate", a, b, "-o", tmp_path / "x.pth"), "BasicSR has no SRGAN SRResNet")


def test_upscale_blend_is_upscaling_the_interpolated_file(ends, tmp_path):
    a, b = ends
    Image.fromarray(skimage_photo("astronaut")[100:124, 150:180]).save(tmp_path / "in.png")
    mid = tmp_path / "mid.safetensors"
    assert run_cli("interpolate", a, b, "--alpha", "0.3", "-o", mid).returncode == 0
    common = (*CPU32, "--tile", "0")
    on_the_fly, from_file = tmp_path / "fly.png", tmp_path / "file.png"
    result = run_cli(
        "upscale", tmp_path / "in.png", "-k", a, "--blend", b, "--blend-alpha", "0.3", "-o", on_the_fly, *common
    )
    assert result.returncode == 0, result
    assert run_cli("upscale", tmp_path / "in.png", "-k", mid, "-o", from_file, *common).returncode == 0
    assert on_the_fly.read_bytes() == from_file.read_bytes()
    plain = tmp_path / "a.png"
    assert run_cli("upscale", tmp_path / "in.png", "-k", a, "-o", plain, *common).returncode == 0
    assert plain.read_bytes() != from_file.read_bytes()  # the blend changed the picture
    result = run_cli("upscale", tmp_path / "in.png", "-k", a, "--blend-alpha", "0.3", *common)
    assert_refused(result, "--blend-alpha: applies with --blend only")


def test_compare_draws_a_strip_of_alphas(ends, tmp_path):
    from srgan.data.sheets import GAP

    a, b = ends
    Image.fromarray(skimage_photo("astronaut")[100:150, 150:194]).save(tmp_path / "hr.png")  # 50 x 44: x4 -> 48 x 44
    out = tmp_path / "strip.png"
    result = run_cli("compare", a, tmp_path / "hr.png", "--blend", b, "--alphas", "0,0.5,1", "-o", out, *CPU32)
    assert result.returncode == 0, result
    assert "bicubic | alpha 0 | alpha 0.5 | alpha 1 | original" in result.stdout
    strip = np.asarray(Image.open(out))
    assert strip.shape == (48, 5 * 44 + 4 * GAP, 3)
    assert_refused(run_cli("compare", a, tmp_path / "hr.png", "--blend", b, "--alphas", "0,2", "-o", out), "--alphas")
    alone = run_cli("compare", a, tmp_path / "hr.png", "--alphas", "0,1", "-o", out)
    assert_refused(alone, "applies with --blend only")


def test_a_run_saves_its_generator_at_the_end_of_the_psnr_phase(photo_dir, tmp_path):
    """One step an epoch (3 photos, batch 3): epoch_001.pt is the run at step 1, written by the
    checkpoint's own path, against which pretrained.pt (pretrain_steps=1) is checked."""
    from srgan.configs import load_config
    from srgan.training import train

    extra = ("train.pretrain_steps=1", "train.epochs=2", "data.repeat=1", "train.ema_decay=0.5", "train.micro_batch=3")
    run = train(load_config("demo", tiny_overrides(photo_dir, tmp_path / "run", *extra)))
    pretrained = torch.load(run / "checkpoints" / "pretrained.pt", weights_only=True)
    at_one = torch.load(run / "checkpoints" / "epoch_001.pt", weights_only=True)
    last = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert pretrained["step"] == at_one["step"] == 1 and last["step"] == 2
    for part in ("generator", "generator_ema"):
        assert pretrained[part].keys() == at_one[part].keys()
        for name, tensor in at_one[part].items():
            assert torch.equal(pretrained[part][name], tensor), (part, name)
    assert any(not torch.equal(last["generator"][k], t) for k, t in pretrained["generator"].items())
    assert not {"discriminator", "optimizer_g"} & pretrained.keys()  # the generator's file, not a resume
    # one run, both ends (each file's EMA weights, as every reader of a checkpoint takes them)
    mid = tmp_path / "mid.safetensors"
    result = run_cli("interpolate", run / "checkpoints" / "pretrained.pt", run, "--alpha", "0.5", "-o", mid)
    assert result.returncode == 0, result
    got = weights(mid)
    for name, tensor in pretrained["generator_ema"].items():
        if tensor.is_floating_point():
            assert torch.equal(got[name], 0.5 * tensor + 0.5 * last["generator_ema"][name]), name


def test_evaluate_blend_scores_the_interpolated_file(ends, tmp_path):
    import json

    a, b = ends
    hr = tmp_path / "hr"
    hr.mkdir()
    Image.fromarray(skimage_photo("astronaut")[100:148, 150:198]).save(hr / "a.png")
    mid = tmp_path / "mid.safetensors"
    assert run_cli("interpolate", a, b, "--alpha", "0.7", "-o", mid).returncode == 0
    reports = []
    for args in (("-k", a, "--blend", b, "--blend-alpha", "0.7"), ("-k", mid), ("-k", a)):
        report = tmp_path / f"{len(reports)}.json"
        result = run_cli("evaluate", hr, *args, "--json", report, "--metrics", "psnr", *CPU32)
        assert result.returncode == 0, result
        reports.append(json.loads(report.read_text())["images"])
    assert reports[0] == reports[1] != reports[2]
