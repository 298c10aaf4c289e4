"""Inference and export of generators srgan trained with a spandrel
architecture (models/spandrel_archs.py): `upscale` whole and tiled,
`compare`, video and `srgan export` to .onnx, .safetensors and .pth, on
odd image sizes that break each network's size rule (SAFMN's and DITN's
multiple of 8, DAT's and SwinIR's minimum of 16), each file read back by
spandrel with srgan's output; and SPAN run in its eval form (the eval
convolution its trained branches merge into) wherever srgan infers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import skimage_photo
from srgan.configs import load_config
from srgan.inference.export import check_input, export_generator
from srgan.inference.fused import fuse_for_inference
from srgan.models.checkpoint import load_generator
from srgan.training import train
from test_spandrel_archs import TINY, spandrel_overrides

spandrel = pytest.importorskip("spandrel")

# Two more architectures, whose size rule is a multiple of 8 (spandrel's descriptors).
ARCHS = {
    **TINY,
    "safmn": ["model.options={dim: 8, n_blocks: 1}"],
    "ditn": ["model.options={dim: 8, ITL_blocks: 1, SAL_blocks: 1, UFONE_blocks: 1}"],
}
CPU = ("--device", "cpu", "--precision", "fp32")
ODD = (1, 3, 13, 11)  # below DAT's and SwinIR's 16, no side a multiple of 8


@pytest.fixture(scope="module", params=list(ARCHS))
def trained(request, photo_dir, tmp_path_factory):
    """2 steps: trained weights (SPAN's branches moved away from their initial eval convolution)."""
    arch = request.param
    folder = tmp_path_factory.mktemp(arch) / "run"
    steps = ("train.max_steps=2", "train.pretrain_steps=2")
    if arch in TINY:
        overrides = spandrel_overrides(arch, photo_dir, folder, *steps)
    else:
        overrides = [*spandrel_overrides("span", photo_dir, folder, *steps), f"model.arch={arch}", *ARCHS[arch]]
    return arch, train(load_config("demo", overrides))


@pytest.fixture(scope="module")
def odd_photo(tmp_path_factory):
    path = tmp_path_factory.mktemp("odd") / "odd.png"
    Image.fromarray(skimage_photo("chelsea")[100:137, 150:175]).save(path)  # 25 x 37
    return path


def pixels(path):
    return np.asarray(Image.open(path)).astype(int)


def test_tiled_and_whole_upscales_agree_on_an_odd_size(trained, odd_photo, srgan, tmp_path):
    """Window transformers (SwinIR, DAT) tile on their windows' grid: a tile
    whose context starts off it groups pixels into other windows. SAFMN's
    tiles read its counted receptive radius (the probe misses its max pooling's reach)."""
    arch, run = trained
    for tile in ("0", "16"):
        result = srgan("upscale", odd_photo, "-k", run, "-o", tmp_path / f"{tile}.png", "--tile", tile, *CPU)
        assert result.returncode == 0, result.stderr
    whole, tiled = pixels(tmp_path / "0.png"), pixels(tmp_path / "16.png")
    assert whole.shape == (148, 100, 3)
    assert np.abs(whole - tiled).max() <= 1, arch


def test_the_upscale_is_spandrels_reading_of_the_exported_file(trained, odd_photo, srgan, tmp_path):
    arch, run = trained
    result = srgan("upscale", odd_photo, "-k", run, "-o", tmp_path / "up.png", "--tile", "0", *CPU)
    assert result.returncode == 0, result.stderr
    assert srgan("export", run, "-o", tmp_path / "g.safetensors").returncode == 0
    read = spandrel.ModelLoader().load_from_file(tmp_path / "g.safetensors")
    x = torch.from_numpy(pixels(odd_photo).astype(np.float32) / 255).permute(2, 0, 1)[None]
    with torch.no_grad():
        theirs = (read(x)[0].permute(1, 2, 0).numpy() * 255).round().astype(int)
    assert np.abs(pixels(tmp_path / "up.png") - theirs).max() <= 1, arch


def test_compare_and_a_video(trained, odd_photo, srgan, tmp_path):
    arch, run = trained
    result = srgan("compare", run, odd_photo, "-o", tmp_path / "c.png")
    assert result.returncode == 0, result.stderr
    assert pixels(tmp_path / "c.png").shape[1] >= 3 * 25
    pytest.importorskip("av")
    from test_video import decode, make_clip

    clip = make_clip(tmp_path / "clip.mp4", frames=2, sound=False)
    result = srgan("upscale", clip, "-k", run, *CPU)
    assert result.returncode == 0, result.stderr
    frames, _ = decode(tmp_path / "clip_x4.mp4")
    assert len(frames) == 2 and frames[0].shape == (192, 256, 3)


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_weight_files_read_back_by_spandrel_with_srgans_output(trained, suffix, tmp_path):
    arch, run = trained
    generator = load_generator(run).eval()
    export_generator(generator, tmp_path / f"g{suffix}")
    read = spandrel.ModelLoader().load_from_file(tmp_path / f"g{suffix}")
    x = check_input(ODD)
    with torch.no_grad():
        assert torch.equal(read(x), generator(x)), arch


# SPAN: the plain graph (no size rule; realplksr's is the same path); SAFMN: the graph
# pads to its multiple of 8 (ditn's rule, the same path). DAT and SwinIR: the window
# reverse fixes the batch at the traced one, so their graph takes batch 1; their export
# takes 70 to 100 s here (two traces), too long for the suite: add "swinir" to the list
# below to run it (docs/export.md has its figures, measured so).
BATCH_ONE = ("dat", "swinir")


@pytest.mark.parametrize("trained", ["span", "safmn"], indirect=True)
def test_onnx_runs_any_size_as_srgan_does(trained, tmp_path):
    """The graph pads to the size rule itself (SAFMN's and DITN's multiple of 8)."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    onnxruntime = pytest.importorskip("onnxruntime")
    arch, run = trained
    generator = load_generator(run).eval()
    report = export_generator(generator, tmp_path / "g.onnx")
    assert report.max_abs_diff <= 1e-4
    assert report.batch == (1 if arch in BATCH_ONE else None)
    assert [shape[0] for shape in report.checked] == ([1, 1] if arch in BATCH_ONE else [1, 2])
    session = onnxruntime.InferenceSession(str(tmp_path / "g.onnx"), providers=["CPUExecutionProvider"])
    for shape in (ODD, (1, 3, 17, 9), (2, 3, 9, 14)):
        x = check_input(shape)
        if arch in BATCH_ONE and shape[0] > 1:
            with pytest.raises(Exception, match="index: 0 Got: 2 Expected: 1"):  # refused, not a wrong output
                session.run(["output"], {"input": x.numpy()})
            continue
        (got,) = session.run(["output"], {"input": x.numpy()})
        with torch.no_grad():
            expected = generator(x)
        assert got.shape == (shape[0], 3, shape[2] * 4, shape[3] * 4)
        assert np.abs(got - expected.numpy()).max() <= 1e-4, arch


@pytest.mark.parametrize("trained", ["span"], indirect=True)
def test_span_infers_with_the_eval_convolution_of_its_trained_branches(trained):
    _, run = trained
    from spandrel.architectures.SPAN.__arch.span import Conv3XC

    generator = load_generator(run).eval()
    block = next(m for m in generator.network.modules() if isinstance(m, Conv3XC))
    x = check_input(ODD)
    with torch.no_grad():
        block.train()
        branches = block(torch.rand(1, block.eval_conv.in_channels, 9, 7, generator=torch.Generator().manual_seed(1)))
        block.eval()
        merged = block(torch.rand(1, block.eval_conv.in_channels, 9, 7, generator=torch.Generator().manual_seed(1)))
        assert torch.allclose(branches, merged, atol=1e-5)  # the eval form computes the trained branches
        fused = fuse_for_inference(generator)
        assert not any(isinstance(m, Conv3XC) for m in fused.modules())
        assert torch.allclose(fused(x), generator(x), atol=1e-6)


@pytest.mark.parametrize("trained", ["span"], indirect=True)
def test_span_leaves_with_the_eval_convolution_of_its_trained_branches(trained, tmp_path):
    """A tool that runs eval_conv as the file holds it (no merge in forward) runs the trained network."""
    _, run = trained
    from spandrel.architectures.SPAN.__arch.span import Conv3XC

    export_generator(load_generator(run), tmp_path / "g.safetensors")
    read = spandrel.ModelLoader().load_from_file(tmp_path / "g.safetensors").model
    blocks = [m for m in read.modules() if isinstance(m, Conv3XC)]
    stored = [m.eval_conv.weight.clone() for m in blocks]
    with torch.no_grad():
        for block in blocks:
            block.update_params()
    assert blocks and all(torch.equal(s, m.eval_conv.weight) for s, m in zip(stored, blocks, strict=True))
