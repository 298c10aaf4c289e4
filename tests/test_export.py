"""`srgan export`: every format of every architecture, read back by the
tools that use it (onnxruntime, spandrel, srgan's own loader), on tiny
random networks; the refusals leave nothing behind; `bench upscale --onnx`.
Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import assert_refused, no_temporary_files, run_cli
from srgan.configs import config_from_dict
from srgan.inference.export import check_input, srgan_output
from srgan.models import build_generator, save_checkpoint
from srgan.models.checkpoint import load_generator

onnxruntime = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

# Tiny networks of each architecture; rrdb at x2, whose input is padded on odd sides.
# rrdb keeps growth 32: spandrel's RRDBNet has ESRGAN's growth fixed.
MODELS = {
    "srresnet": {"arch": "srresnet", "scale": 4, "blocks": 1, "channels": 8},
    "rrdb": {"arch": "rrdb", "scale": 2, "blocks": 1, "channels": 8, "growth": 32},
    "compact": {"arch": "compact", "scale": 4, "blocks": 2, "channels": 8},
}
SPANDREL_NAMES = {"rrdb": "ESRGAN", "compact": "Compact"}


def tiny_checkpoint(path: Path, name: str, ema: bool = False) -> Path:
    """A generator-only checkpoint of MODELS[name], its weights random and
    (for the EMA test) a second, different set as generator_ema."""
    model = config_from_dict({"model": MODELS[name]}).model
    torch.manual_seed(1)
    generator = build_generator(model)
    with torch.no_grad():  # away from initialisations that make trivial outputs (zero tails, 0.1-scaled convs)
        for parameter in generator.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    state = {
        "generator": generator.state_dict(),
        "discriminator": {},
        "optimizer_g": {},
        "optimizer_d": {},
        "epoch": 0,
        "step": 0,
        "config": {"model": MODELS[name]},
    }
    if ema:
        state["generator_ema"] = {k: v + 0.01 if v.is_floating_point() else v for k, v in state["generator"].items()}
    save_checkpoint(path, state)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("checkpoints")
    return {name: tiny_checkpoint(folder / f"{name}.pt", name) for name in MODELS}


@pytest.fixture(scope="module")
def onnx_files(checkpoints, tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Each tiny checkpoint exported to ONNX once (the slow part: torch.export),
    with what the command printed."""
    folder = tmp_path_factory.mktemp("onnx")
    files = {}
    for name, checkpoint in checkpoints.items():
        target = folder / f"{name}.onnx"
        result = run_cli("export", checkpoint, "-o", target)
        files[name] = (target, result)
    return files


def ours(checkpoint: Path, x: torch.Tensor) -> torch.Tensor:
    return srgan_output(load_generator(checkpoint), x)


def assert_exported(result, target: Path) -> float:
    """Exit 0, the file there, no temporary left; the difference it printed."""
    assert result.returncode == 0, result.stderr
    assert target.is_file() and not no_temporary_files(target.parent)
    printed = result.stdout.split("largest difference from srgan's fp32 output ")[1].split()[0]
    return float(printed)


@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_runs_in_onnxruntime_at_any_size_as_srgan_computes(name, checkpoints, onnx_files):
    target, result = onnx_files[name]
    printed = assert_exported(result, target)
    assert printed <= 1e-4
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    (graph_input,), (graph_output,) = session.get_inputs(), session.get_outputs()
    assert (graph_input.name, graph_input.type, graph_output.name, graph_output.type) == (
        "input",
        "tensor(float)",
        "output",
        "tensor(float)",
    )
    assert graph_input.shape[1] == 3 and all(isinstance(d, str) for d in graph_input.shape[0:1] + graph_input.shape[2:])
    scale = MODELS[name]["scale"]
    # an odd size, then another batch and size: the axes are dynamic
    for shape in [(1, 3, 21, 15), (3, 3, 16, 12)]:
        x = check_input(shape)
        (got,) = session.run(None, {"input": x.numpy()})
        expected = ours(checkpoints[name], x)
        assert got.shape == (shape[0], 3, shape[2] * scale, shape[3] * scale)
        assert 0.0 <= got.min() and got.max() <= 1.0  # clamped, as srgan upscale's output
        assert 0.05 < float((expected > 0).float().mean()) and float(expected.std()) > 1e-3  # computes something
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-4, rtol=0)
    model = onnx.load(str(target))
    metadata = {p.key: p.value for p in model.metadata_props}
    assert metadata["arch"] == name and metadata["scale"] == str(scale)
    assert str(Path(__file__).parent.parent) not in str(model)  # no stack traces naming this machine's paths


def test_onnx_fp16_halves_the_weights_and_keeps_float32_input_and_output(checkpoints, onnx_files, tmp_path):
    fp32, fp16 = onnx_files["compact"][0], tmp_path / "fp16.onnx"
    printed = assert_exported(run_cli("export", checkpoints["compact"], "-o", fp16, "--fp16", "--opset", "20"), fp16)
    assert 0 < printed <= 1e-2  # fp16 rounding shows, within the tolerance
    model = onnx.load(str(fp16))
    assert model.opset_import[0].version == 20
    weights = {t.name: t.data_type for t in model.graph.initializer if len(t.dims) == 4}
    assert weights and set(weights.values()) == {onnx.TensorProto.FLOAT16}
    weight_bytes = [sum(len(t.raw_data) for t in onnx.load(str(f)).graph.initializer) for f in (fp32, fp16)]
    assert weight_bytes[1] < 0.55 * weight_bytes[0]
    session = onnxruntime.InferenceSession(str(fp16), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == session.get_outputs()[0].type == "tensor(float)"
    x = check_input((1, 3, 19, 13))
    (got,) = session.run(None, {"input": x.numpy()})
    np.testing.assert_allclose(got, ours(checkpoints["compact"], x).numpy(), atol=1e-2, rtol=0)


@pytest.mark.parametrize("name", list(MODELS))
def test_safetensors_carries_the_model_section_and_rebuilds_the_network(name, checkpoints, tmp_path):
    from safetensors import safe_open

    target = tmp_path / f"{name}.safetensors"
    assert assert_exported(run_cli("export", checkpoints[name], "-o", target), target) == 0.0
    with safe_open(str(target), "pt") as file:
        metadata = file.metadata()
        weights = {key: file.get_tensor(key) for key in file.keys()}  # noqa: SIM118 (safe_open is no mapping)
    assert metadata["arch"] == name and metadata["scale"] == str(MODELS[name]["scale"])
    section = json.loads(metadata["srgan_model"])
    assert {k: section[k] for k in MODELS[name]} == MODELS[name]
    rebuilt = build_generator(config_from_dict({"model": section}).model)
    rebuilt.load_state_dict(weights, strict=True)
    x = check_input((1, 3, 17, 11))
    assert torch.equal(srgan_output(rebuilt, x), ours(checkpoints[name], x))
    # srgan's own loader reads the file back to the same network (srresnet through the metadata alone)
    assert torch.equal(srgan_output(load_generator(target), x), ours(checkpoints[name], x))


def test_a_community_file_exports_and_the_export_reads_back(tmp_path):
    """A BasicSR-layout .pth (params_ema) in, .safetensors out, and srgan's
    loader reads that to the same output: a published model leaves as it came."""
    torch.manual_seed(3)
    generator = build_generator(config_from_dict({"model": MODELS["rrdb"]}).model).eval()
    torch.save({"params_ema": generator.state_dict()}, tmp_path / "published.pth")
    target = tmp_path / "published.safetensors"
    assert assert_exported(run_cli("export", tmp_path / "published.pth", "-o", target), target) == 0.0
    x = check_input((1, 3, 13, 9))
    assert torch.equal(srgan_output(load_generator(target), x), srgan_output(generator, x))


def test_a_run_folder_exports_its_last_checkpoint(tiny_run, tmp_path):
    """`srgan export runs/mine -o mine.safetensors`: the run's checkpoints/last.pt."""
    from safetensors.torch import load_file

    target = tmp_path / "mine.safetensors"
    assert_exported(run_cli("export", tiny_run, "-o", target), target)
    expected = load_generator(tiny_run / "checkpoints" / "last.pt").state_dict()
    written = load_file(str(target))
    assert written.keys() == expected.keys() and all(torch.equal(written[k], v) for k, v in expected.items())


def test_the_weights_exported_are_the_ema_weights_when_the_run_kept_them(tmp_path):
    from safetensors.torch import load_file

    checkpoint = tiny_checkpoint(tmp_path / "ema.pt", "compact", ema=True)
    target = tmp_path / "ema.safetensors"
    assert_exported(run_cli("export", checkpoint, "-o", target), target)
    state = torch.load(checkpoint, weights_only=True)
    written = load_file(str(target))
    assert all(torch.equal(written[k], v) for k, v in state["generator_ema"].items())
    assert not torch.equal(written["body.0.weight"], state["generator"]["body.0.weight"])


@pytest.mark.parametrize("name, suffix", [("rrdb", ".safetensors"), ("rrdb", ".pth"), ("compact", ".pth")])
def test_spandrel_loads_the_exported_file_to_the_same_output(name, suffix, checkpoints, tmp_path):
    import spandrel  # a dev dependency, the oracle: its absence fails the test

    target = tmp_path / f"{name}{suffix}"
    assert_exported(run_cli("export", checkpoints[name], "-o", target), target)
    if suffix == ".pth":  # BasicSR's layout, as Real-ESRGAN's inference script reads it
        assert list(torch.load(target, weights_only=True)) == ["params_ema"]
    descriptor = spandrel.ModelLoader().load_from_file(str(target))
    assert descriptor.architecture.id == SPANDREL_NAMES[name] and descriptor.scale == MODELS[name]["scale"]
    x = check_input((1, 3, 21, 15))
    with torch.no_grad():
        theirs = descriptor.model.eval()(x).clamp(0, 1)
    torch.testing.assert_close(theirs, ours(checkpoints[name], x), atol=1e-5, rtol=0)


def stored_tensor_bytes(path: Path) -> dict[str, int]:
    """The bytes each tensor storage takes in a torch zip file, read from the
    archive's own entries (archive/data/N), not from what torch.load rebuilds."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        return {i.filename: i.file_size for i in archive.infolist() if "/data/" in i.filename}


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_fp16_weight_files_hold_half_the_bytes_and_compute_nearly_the_same(suffix, checkpoints, tmp_path):
    from safetensors import safe_open

    full, half = tmp_path / f"full{suffix}", tmp_path / f"half{suffix}"
    assert assert_exported(run_cli("export", checkpoints["rrdb"], "-o", full), full) == 0.0
    printed = assert_exported(run_cli("export", checkpoints["rrdb"], "-o", half, "--fp16"), half)
    assert 0 < printed <= 1e-2  # fp16 rounding shows, within the tolerance
    weights = load_generator(checkpoints["rrdb"]).state_dict()
    fp32_bytes = sum(t.numel() * 4 for t in weights.values())
    if suffix == ".pth":
        stored = [stored_tensor_bytes(f) for f in (full, half)]
        assert sum(stored[0].values()) == fp32_bytes and len(stored[1]) == len(weights)
        assert sum(stored[1].values()) == fp32_bytes // 2  # every tensor stored in 2 bytes a value, nothing else
        state = torch.load(half, weights_only=True)
        assert list(state) == ["params_ema"] and {v.dtype for v in state["params_ema"].values()} == {torch.float16}
    else:
        with safe_open(str(half), "pt") as file:
            dtypes = {file.get_slice(k).get_dtype() for k in file.keys()}  # noqa: SIM118 (safe_open is no mapping)
        assert dtypes == {"F16"}
    assert half.stat().st_size < 0.55 * full.stat().st_size  # the file itself, headers included


def test_refusals_are_one_line_and_leave_nothing_behind(checkpoints, tmp_path):
    existing = tmp_path / "taken.onnx"
    existing.write_bytes(b"theirs")
    assert_refused(run_cli("export", checkpoints["compact"], "-o", existing), "exists (use --force")
    assert existing.read_bytes() == b"theirs"
    bad = tmp_path / "model.bin"
    assert_refused(run_cli("export", checkpoints["compact"], "-o", bad), ".onnx/.safetensors/.pth")
    srresnet_pth = tmp_path / "srresnet.pth"
    result = run_cli("export", checkpoints["srresnet"], "-o", srresnet_pth)
    assert_refused(result, "BasicSR has no SRGAN SRResNet")
    assert ".safetensors" in result.stderr and ".onnx" in result.stderr
    not_a_checkpoint = tmp_path / "notes.pt"
    not_a_checkpoint.write_text("not a checkpoint")
    assert_refused(run_cli("export", not_a_checkpoint, "-o", tmp_path / "x.onnx"), "notes.pt")
    assert_refused(run_cli("export", tmp_path / "missing", "-o", tmp_path / "y.onnx"), "missing")
    assert_refused(run_cli("export", checkpoints["compact"], "-o", tmp_path / "z.pth", "--opset", "18"), "--opset")
    assert_refused(run_cli("export", checkpoints["compact"], "-o", tmp_path / "w.onnx", "--opset", "17"), "18 to 23")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.pt", "taken.onnx"]


def test_force_replaces_an_existing_file(checkpoints, tmp_path):
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"old")
    assert_exported(run_cli("export", checkpoints["compact"], "-o", target, "--force"), target)
    assert target.read_bytes()[:8] != b"old"


def test_a_file_above_the_tolerance_is_refused_and_not_written(checkpoints, tmp_path, monkeypatch):
    from srgan.inference import export

    monkeypatch.setitem(export.TOLERANCE, "fp16", 1e-7)  # fp16 rounding is far above it
    target = tmp_path / "strict.onnx"
    assert_refused(run_cli("export", checkpoints["compact"], "-o", target, "--fp16"), "above the fp16 tolerance")
    assert list(tmp_path.iterdir()) == []


def test_bench_upscale_times_onnxruntime_on_the_same_image(checkpoints, onnx_files):
    target = onnx_files["compact"][0]
    result = run_cli(
        "bench", "upscale", "-k", checkpoints["compact"], "--onnx", target, "--size", "24x20",
        "--iters", "1", "--warmup", "0", "--no-baseline", "--device", "cpu", "--precision", "fp32", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert (figures["arch"], figures["scale"], figures["precision"], figures["device"]) == ("compact", 4, "fp32", "cpu")
    assert figures["onnx_threads"] == figures["threads"] and figures["onnx_input_type"] == "tensor(float)"
    assert figures["onnx_over_torch"] == figures["onnx_median_s"] / figures["median_s"]
    assert figures["onnx_max_level_diff"] <= 1  # the same model, rounded to 8 bits by each
    other = onnx_files["rrdb"][0]  # x2, not x4
    refused = run_cli("bench", "upscale", "-k", checkpoints["compact"], "--onnx", other, "--size", "24x20",
                      "--iters", "1", "--warmup", "0", "--no-baseline", "--precision", "fp32")  # fmt: skip
    assert_refused(refused, "not the same model")


# ---- the community's architectures, loaded through spandrel ----------------------------


def spandrel_file(path: Path, arch: str) -> Path:
    """A tiny network of spandrel's own class with random weights, saved as a
    plain state dict (as SPAN, RealPLKSR and SwinIR files are published)."""
    torch.manual_seed(5)
    if arch == "SPAN":
        from spandrel.architectures.SPAN import SPAN

        network = SPAN(num_in_ch=3, num_out_ch=3, feature_channels=4, upscale=2)
        with torch.no_grad():  # its 255-scaled features put most outputs at the clamp otherwise
            network.upsampler[0].weight.mul_(0.02)
            network.upsampler[0].bias.add_(0.5)
    elif arch == "RealPLKSR":
        from spandrel.architectures.PLKSR import RealPLKSR

        network = RealPLKSR(dim=8, n_blocks=1, upscaling_factor=2, kernel_size=5)
    else:
        from spandrel.architectures.SwinIR import SwinIR

        network = SwinIR(
            img_size=8, embed_dim=6, depths=[1], num_heads=[1], window_size=4, mlp_ratio=1.0, upscale=2,
            upsampler="pixelshuffle",
        )  # fmt: skip
    torch.save(network.state_dict(), path)
    return path


def test_a_span_file_exports_to_onnx_that_computes_what_srgan_computes(tmp_path):
    """SPAN's blocks recompute their eval convolution from the training
    branches in every eval forward (assigning the parameters' .data): torch's
    exporter then fell back to its strict tracer, whose decompositions
    crashed the process (a segmentation fault, nothing printed)."""
    source = spandrel_file(tmp_path / "span.pth", "SPAN")
    target = tmp_path / "span.onnx"
    assert assert_exported(run_cli("export", source, "-o", target), target) <= 1e-4
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    x = check_input((1, 3, 21, 15))
    (got,) = session.run(None, {"input": x.numpy()})
    expected = ours(source, x)
    assert got.shape == (1, 3, 42, 30) and 0.2 < float(((expected > 0) & (expected < 1)).float().mean())
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-4, rtol=0)
    metadata = {p.key: p.value for p in onnx.load(str(target)).metadata_props}
    assert metadata == {"arch": "SPAN", "scale": "2"}  # no srgan_model: srgan reads SPAN through spandrel


def test_a_network_the_exporter_cannot_trace_is_refused_in_one_line_naming_the_file(tmp_path, monkeypatch):
    """SPAN left unfolded is what any network that mutates its parameters in
    forward gives the exporter: srgan refuses it with torch.export's reason,
    never handing it to the fallback that crashed."""
    import copy

    from srgan.files.errors import SrganError
    from srgan.inference import export

    source = spandrel_file(tmp_path / "span.pth", "SPAN")
    monkeypatch.setattr(export, "fuse_for_inference", lambda g: copy.deepcopy(g).eval())
    with pytest.raises(SrganError) as refused:
        export.export_generator(load_generator(source), tmp_path / "x.onnx", source=source)
    message = str(refused.value)
    assert "\n" not in message and str(source) in message and "SPAN" in message and "torch.export" in message
    assert list(tmp_path.iterdir()) == [source]


class SortsItsPixels(torch.nn.Module):
    """A network torch.export traces but torch's ONNX converter cannot
    translate: an unstable sort (aten.sort.stable, as ATD's token sort)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        _, order = torch.sort(x.argmax(1).flatten(1), dim=-1, stable=False)
        return self.inner(x) + order.float().mean() * 0


def test_a_network_the_onnx_converter_cannot_translate_is_refused_in_one_line(tmp_path, monkeypatch):
    """ATD (spandrel 0.4.2, torch 2.14.1) traces, then fails in the converter:
    one line naming the file, the network and the op, nothing written."""
    from srgan.files.errors import SrganError
    from srgan.inference import export

    source = spandrel_file(tmp_path / "span.pth", "SPAN")
    fuse = export.fuse_for_inference
    monkeypatch.setattr(export, "fuse_for_inference", lambda g: SortsItsPixels(fuse(g)))
    with pytest.raises(SrganError) as refused:
        export.export_generator(load_generator(source), tmp_path / "x.onnx", source=source)
    message = str(refused.value)
    assert "\n" not in message and str(source) in message and "SPAN" in message
    assert "converter fails" in message and "aten.sort.stable" in message
    assert list(tmp_path.iterdir()) == [source]


@pytest.mark.parametrize("arch", ["SPAN", "RealPLKSR"])
@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_a_spandrel_file_exports_to_weight_files_srgan_and_spandrel_read(arch, suffix, tmp_path):
    """The file holds the network's own parameter names (not srgan's wrapper's
    "network." prefix), and the export's check reads it as srgan upscale does."""
    spandrel = pytest.importorskip("spandrel")
    source = spandrel_file(tmp_path / "source.pth", arch)
    target = tmp_path / f"exported{suffix}"
    assert assert_exported(run_cli("export", source, "-o", target), target) == 0.0
    published = torch.load(source, weights_only=True)
    if suffix == ".pth":
        state = torch.load(target, weights_only=True)
        assert list(state) == ["params_ema"] and state["params_ema"].keys() == published.keys()
    x = check_input((1, 3, 21, 15))
    assert torch.equal(ours(target, x), ours(source, x))  # srgan's own loader
    descriptor = spandrel.ModelLoader().load_from_file(str(target))
    assert descriptor.architecture.id == load_generator(source).arch and descriptor.scale == 2
    with torch.no_grad():
        torch.testing.assert_close(descriptor(x), ours(source, x), atol=1e-6, rtol=0)


def test_an_fp16_onnx_of_a_network_spandrel_runs_in_fp32_only_is_refused_naming_the_file(tmp_path):
    source = spandrel_file(tmp_path / "swinir.pth", "SwinIR")
    result = run_cli("export", source, "-o", tmp_path / "swinir.onnx", "--fp16")
    assert_refused(result, str(source))
    assert "SwinIR" in result.stderr and "fp16" in result.stderr and "model.arch" not in result.stderr
    assert list(tmp_path.iterdir()) == [source]


def test_a_graph_onnxruntime_cannot_run_is_refused_in_one_line(checkpoints, onnx_files, monkeypatch, tmp_path):
    """A tiny SwinIR's graph fails in onnxruntime on the second check size
    (a width the exporter fixed from the traced one: a Reshape that no longer
    fits): a traceback before. Here a check input of 4 channels fails the same way."""
    from srgan.files.errors import SrganError
    from srgan.inference import export

    monkeypatch.setattr(export, "CHECK_SHAPES", ((1, 4, 16, 16),))
    with pytest.raises(SrganError) as refused:
        generator = load_generator(checkpoints["compact"])
        export.check_onnx(onnx_files["compact"][0], generator, "fp32", tmp_path / "x.onnx")
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'x.onnx'}: not written: onnxruntime cannot run")
    assert "1x4x16x16" in message
