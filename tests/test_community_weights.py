"""The community's generator files, built here with random weights in each
published layout and saved as each file kind (nothing is downloaded): srgan
recognises them, loads them and computes what spandrel (chaiNNer's loader)
computes from them; `srgan upscale -k FILE` runs them; `srgan train` starts
from them (model.init_from, gan.init_from) with the shape they bring; and
every file that is not one is refused in one line, exit 2, nothing run."""

from __future__ import annotations

import json
import re

import pytest
import safetensors.torch as safetensors_torch
import spandrel  # dev dependencies, the oracles: their absence is a failure, not a skip
import torch
import yaml
from PIL import Image

from conftest import assert_refused, set_args, skimage_photo
from srgan.configs import load_config
from srgan.files.errors import SrganError
from srgan.models.checkpoint import load_described_generator, load_generator, read_generator_file
from srgan.models.compact import SRVGGNetCompact
from srgan.models.discriminator_unet import UNetDiscriminatorSN
from srgan.models.generator import Generator
from srgan.models.rrdb import RRDBNet
from srgan.models.spandrel_generator import SpandrelGenerator
from test_interop_arch import basicsr_rrdbnet, realesrgan_compact

X = torch.rand(1, 3, 9, 11, generator=torch.Generator().manual_seed(1))


# ---- the layouts, written down from their sources ---------------------------------


def esrgan_trunk(basicsr: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """xinntao/ESRGAN's RRDBNet_arch.py (2018): the same network as BasicSR's
    under RRDB_trunk.N.RDBr, trunk_conv, upconv1/2, HRconv."""
    renamed = {}
    for key, value in basicsr.items():
        key = re.sub(r"^body\.(\d+)\.rdb(\d)\.", r"RRDB_trunk.\1.RDB\2.", key)
        key = re.sub(r"^conv_body\.", "trunk_conv.", key)
        key = re.sub(r"^conv_up(\d)\.", r"upconv\1.", key)
        key = re.sub(r"^conv_hr\.", "HRconv.", key)
        renamed[key] = value
    return renamed


def esrgan_sequential(blocks: int, feat: int, scale: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    """ESRGAN's original release (model.0, model.1.sub.N.RDBr.convK.0, ...):
    spandrel's ESRGAN class holds that layout."""
    from spandrel.architectures.ESRGAN import ESRGAN

    torch.manual_seed(seed)
    return ESRGAN(num_filters=feat, num_blocks=blocks, scale=scale).state_dict()


def save(state: dict[str, torch.Tensor], path, kind: str):
    """As BasicSR (params_ema, params), other trainers (model, net, state_dict), a bare state dict, a DataParallel
    run's, or safetensors."""
    if kind == "safetensors":
        path = path.with_suffix(".safetensors")
        safetensors_torch.save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    elif kind == "module":
        torch.save({f"module.{k}": v for k, v in state.items()}, path)
    elif kind == "trainer":  # a trainer's whole save: weights beside its optimizer and step, netG. names
        torch.save({"state_dict": {f"netG.{k}": v for k, v in state.items()}, "step": 5, "optimizer": {}}, path)
    elif kind == "top":
        torch.save(state, path)
    else:
        torch.save({kind: state}, path)
    return path


def reference(state: dict[str, torch.Tensor], x: torch.Tensor = X, network_only: bool = True) -> torch.Tensor:
    """spandrel's output from the same weights: its network's (not clamped), or
    its descriptor's (padded, clamped: what an architecture only spandrel knows gives)."""
    descriptor = spandrel.ModelLoader().load_from_state_dict(state)
    with torch.no_grad():
        return descriptor.model.eval()(x) if network_only else descriptor(x)


def ours(path, x: torch.Tensor = X) -> tuple[torch.nn.Module, torch.Tensor]:
    generator = load_generator(path).eval()
    with torch.no_grad():
        return generator, generator(x)


# ---- recognised, loaded, the same function ----------------------------------------


@pytest.mark.parametrize(
    "layout, kind",
    [
        ("basicsr", "params_ema"),
        ("basicsr", "params"),
        ("basicsr", "module"),
        ("basicsr", "trainer"),
        ("basicsr", "model"),
        ("basicsr", "net"),
        ("basicsr", "safetensors"),
        ("trunk", "safetensors"),
        ("sequential", "top"),
        ("sequential", "params_ema"),
    ],
)
def test_rrdbnet_files_of_every_layout_load_and_compute_what_spandrel_computes(layout, kind, tmp_path):
    state = {
        "basicsr": lambda: basicsr_rrdbnet(4, 2, 16),
        "trunk": lambda: esrgan_trunk(basicsr_rrdbnet(4, 2, 16)),
        "sequential": lambda: esrgan_sequential(2, 16),
    }[layout]()
    path = save(state, tmp_path / "model.pth", kind)
    generator, out = ours(path)
    assert isinstance(generator, RRDBNet)
    assert (generator.scale, generator.blocks, generator.channels, generator.growth) == (4, 2, 16, 32)
    assert out.abs().mean() > 1e-2
    torch.testing.assert_close(out, reference(state), atol=1e-5, rtol=0)
    said = load_described_generator(path)[1]
    assert re.fullmatch(r"RRDBNet \(.*layout.*\), x4, 2 blocks, 16 channels, growth 32 from .*model\.\w+", said)


@pytest.mark.parametrize("scale", [2, 1])
def test_rrdbnet_scale_comes_from_the_first_convs_input_channels(scale, tmp_path):
    state = basicsr_rrdbnet(scale, 1, 16)
    generator, out = ours(save(state, tmp_path / "x.pth", "params_ema"))
    assert generator.scale == scale
    torch.testing.assert_close(out, reference(state), atol=1e-5, rtol=0)


@pytest.mark.parametrize("convs, kind", [(16, "params"), (32, "safetensors")])
def test_compact_files_load_and_compute_what_spandrel_computes(convs, kind, tmp_path):
    """16 convs: realesr-animevideov3's layout; 32: realesr-general-x4v3's (8 channels here, not 64)."""
    state = realesrgan_compact(4, convs, 8)
    generator, out = ours(save(state, tmp_path / "c.pth", kind))
    assert isinstance(generator, SRVGGNetCompact) and (generator.blocks, generator.channels) == (convs, 8)
    torch.testing.assert_close(out, reference(state), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "weights",
    [lambda seed: basicsr_rrdbnet(4, 1, 8, seed=seed), lambda seed: tiny_span(seed)],
    ids=["rrdbnet", "span-through-spandrel"],
)
def test_a_basicsr_file_with_both_weights_gives_its_ema_weights(weights, tmp_path):
    """BasicSR's EMA runs save the plain weights and the EMA's, other ones
    under each key (`params` first here, as a dict's order cannot decide):
    srgan reads `params_ema`, as spandrel and Real-ESRGAN's inference do,
    to upscale and to train from."""
    plain, ema = weights(1), weights(2)
    path = tmp_path / "net_g_ema.pth"
    torch.save({"params": plain, "params_ema": ema}, path)
    out = ours(path)[1].clamp(0, 1)  # as spandrel's descriptor gives it
    torch.testing.assert_close(out, spandrel_file_output(path), atol=1e-5, rtol=0)
    torch.testing.assert_close(out, reference(ema, network_only=False), atol=1e-5, rtol=0)
    assert (out - reference(plain, network_only=False)).abs().max() > 1e-2  # the two keys' weights differ
    if "conv_first.weight" in ema:  # an architecture srgan trains: model.init_from reads the same weights
        assert torch.equal(read_generator_file(path).weights["conv_first.weight"], ema["conv_first.weight"])


def spandrel_file_output(path, x: torch.Tensor = X) -> torch.Tensor:
    """spandrel's output from the file itself (its own unwrapping of the file's keys)."""
    descriptor = spandrel.ModelLoader().load_from_file(str(path))
    with torch.no_grad():
        return descriptor(x)


def srgan_safetensors(path, generator: torch.nn.Module, model: dict) -> None:
    """What `srgan export -o x.safetensors` writes: the weights, and the model section as metadata."""
    metadata = {"srgan_model": json.dumps(model), "arch": model["arch"], "scale": str(model["scale"])}
    state = {k: v.contiguous() for k, v in generator.state_dict().items()}
    safetensors_torch.save_file(state, str(path), metadata=metadata)


def test_an_srresnet_round_trips_through_safetensors_by_its_metadata(tmp_path):
    """No other tool knows srgan's SRResNet: the metadata builds it."""
    model = {"arch": "srresnet", "scale": 2, "blocks": 2, "channels": 8, "norm": "none", "residual": "bicubic"}
    torch.manual_seed(0)
    original = Generator(2, 2, 8, norm="none", residual="bicubic").eval()
    srgan_safetensors(tmp_path / "g.safetensors", original, model)
    generator, out = ours(tmp_path / "g.safetensors")
    with torch.no_grad():
        assert torch.equal(out, original(X))
    assert isinstance(generator, Generator) and generator.scale == 2
    # metadata that does not describe the tensors: named, not guessed around
    srgan_safetensors(tmp_path / "lies.safetensors", original, {**model, "blocks": 3})
    with pytest.raises(SrganError, match=r"lies\.safetensors: generator: lacks body\.2\."):
        load_generator(tmp_path / "lies.safetensors")


def tiny_span(seed: int = 0) -> dict[str, torch.Tensor]:
    from spandrel.architectures.SPAN import SPAN

    torch.manual_seed(seed)
    return SPAN(num_in_ch=3, num_out_ch=3, feature_channels=8, upscale=4).state_dict()


def tiny_swinir(seed: int = 0) -> dict[str, torch.Tensor]:
    """A SwinIR of one 12-wide layer with 4 px windows (attention; its building warns of torch.meshgrid)."""
    from spandrel.architectures.SwinIR import SwinIR

    torch.manual_seed(seed)
    model = SwinIR(
        img_size=16,
        embed_dim=12,
        depths=[1],
        num_heads=[2],
        window_size=4,
        mlp_ratio=2,
        upscale=4,
        upsampler="pixelshuffledirect",
    )
    return model.state_dict()


def test_an_architecture_only_spandrel_knows_runs_through_it_for_inference(tmp_path):
    state = tiny_span()
    path = save(state, tmp_path / "4x-span.pth", "top")
    generator, out = ours(path)
    assert isinstance(generator, SpandrelGenerator) and (generator.arch, generator.scale) == ("SPAN", 4)
    assert out.mean() > 1e-2
    torch.testing.assert_close(out, reference(state, network_only=False), atol=1e-6, rtol=0)
    found = read_generator_file(path)  # srgan trains SPAN too: model.init_from reads the same weights
    assert (found.model.arch, found.model.options["feature_channels"]) == ("span", 8)
    assert all(torch.equal(found.weights[f"network.{key}"], tensor) for key, tensor in state.items())


def test_an_x8_rrdbnet_runs_through_spandrel_and_is_refused_for_training(tmp_path):
    state = esrgan_sequential(1, 8, scale=8)
    path = save(state, tmp_path / "x8.pth", "top")
    generator, out = ours(path)
    assert isinstance(generator, SpandrelGenerator) and generator.scale == 8
    torch.testing.assert_close(out, reference(state, network_only=False), atol=1e-5, rtol=0)
    with pytest.raises(SrganError, match=r"with 3 upsampling convs .* srgan's RRDBNet has 2"):
        read_generator_file(path)


# ---- the command line ------------------------------------------------------------


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray(skimage_photo("coffee")[100:124, 200:230]).save(path)
    return path


@pytest.mark.parametrize(
    "name, state, first_line",
    [
        ("RealESRGAN_x4plus.pth", lambda: {"params_ema": basicsr_rrdbnet(4, 1, 8)}, "model: RRDBNet (BasicSR/"),
        ("4x-SwinIR.pth", lambda: {"params": tiny_swinir()}, "model: SwinIR (through spandrel), x4"),
    ],
)
def test_upscale_runs_a_community_file_and_says_what_it_recognised_first(name, state, first_line, srgan, photo):
    torch.save(state(), photo.parent / name)
    result = srgan("upscale", photo, "-k", photo.parent / name, "--tile", "16", "--precision", "bf16")
    assert result.returncode == 0, result
    assert result.stderr.splitlines()[0].startswith(first_line), result.stderr
    with Image.open(photo.parent / "photo_x4.png") as out:
        assert out.size == (120, 96)


class Planted:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))  # creates the marker file when unpickled


def forged_safetensors(path, how: str) -> None:
    good = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    if how == "length past the file":
        path.write_bytes((10**6).to_bytes(8, "little") + good + bytes(8))
    elif how == "bad JSON":
        body = b"{not json" + b" " * (len(good) - 9)
        path.write_bytes(len(body).to_bytes(8, "little") + body + bytes(8))
    else:  # offsets out of range
        header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4096]}}).encode()
        path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))


@pytest.mark.parametrize(
    "case, culprit",
    [
        ("neither", "expected a PyTorch file (.pth, .pt) or a .safetensors file"),
        ("truncated", "expected a PyTorch file (.pth, .pt) or a .safetensors file"),
        ("pickle", "refused: loading it would run Python code"),
        ("length past the file", "safetensors header claims 1,000,000 bytes"),
        ("bad JSON", "safetensors header is not JSON"),
        ("offsets out of range", "lie outside the 8 bytes of data"),
        ("unknown keys", "fit no generator srgan knows"),
    ],
)
def test_files_that_are_no_generator_are_refused_in_one_line(case, culprit, srgan, photo, tmp_path):
    marker = tmp_path / "PWNED"
    path = tmp_path / (
        "m.safetensors" if case in ("length past the file", "bad JSON", "offsets out of range") else "m.pth"
    )
    if case == "neither":
        path.write_bytes(b"GIF89a" + bytes(200))
    elif case == "truncated":
        torch.save(basicsr_rrdbnet(4, 1, 8), path)
        path.write_bytes(path.read_bytes()[:5000])
    elif case == "pickle":
        torch.save({"params": {"conv_first.weight": Planted(marker)}}, path)
    elif case == "unknown keys":
        torch.save({"encoder.0.weight": torch.ones(4, 3, 3, 3), "decoder.weight": torch.ones(3, 4, 1, 1)}, path)
    else:
        forged_safetensors(path, case)
    for args in (("upscale", photo, "-k", path), ("train", "--set", f"model.init_from={path}")):
        result = srgan(*args)
        assert_refused(result, culprit)
        assert len(result.stderr.strip().splitlines()) == 1 and str(path) in result.stderr, result.stderr
    assert not marker.exists() and not (photo.parent / "photo_x4.png").exists()


# ---- fine-tuning -------------------------------------------------------------------


def finetune_settings(photo_dir, run_dir, *extra: str) -> list[str]:
    """The finetune_realesrgan_x4 preset cut to seconds: tiny crops and batches,
    random VGG features, 2 steps."""
    return [
        f"data.train={photo_dir}",
        "data.crop_size=32",
        "data.batch_size=2",
        "train.micro_batch=2",  # the plan's trial steps are test_micro_batch's
        "train.curves=false",
        "data.workers=0",
        "data.repeat=2",
        "loss.perceptual.weights=none",
        "loss.perceptual.layers={conv1_2: 1.0}",
        "train.max_steps=2",
        "train.epochs=1",
        "train.precision=fp32",
        "train.device=cpu",
        "train.log_every=1",
        "train.ema_decay=0",
        "loss.weights.ldl=0",  # the preset's LDL needs an EMA, which these runs keep off
        f"train.run_dir={run_dir}",
        *extra,
    ]


def netd(width: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """RealESRGAN_x4plus_netD.pth's layout: Real-ESRGAN's UNetDiscriminatorSN (srgan's
    has its names: weight_orig, weight_u, weight_v of spectral norm)."""
    torch.manual_seed(seed)
    return UNetDiscriminatorSN(width).state_dict()


def test_finetuning_takes_the_shape_from_the_files_and_starts_from_their_weights(photo_dir, tmp_path):
    from srgan.training.loop import Trainer

    generator, discriminator = basicsr_rrdbnet(4, 2, 8, grow=4), netd(8)
    torch.save({"params_ema": generator}, tmp_path / "g.pth")
    torch.save({"params": discriminator}, tmp_path / "d.pth")
    config = load_config(
        "finetune_realesrgan_x4",
        finetune_settings(
            photo_dir, tmp_path / "run", f"model.init_from={tmp_path / 'g.pth'}", f"gan.init_from={tmp_path / 'd.pth'}"
        ),
    )
    trainer = Trainer(config)
    try:
        m = trainer.config.model
        assert (m.arch, m.scale, m.blocks, m.channels, m.growth, m.d_channels) == ("rrdb", 4, 2, 8, 4, 8)
        for weights, module in ((generator, trainer.parts.generator), (discriminator, trainer.parts.discriminator)):
            state = module.state_dict()
            assert state.keys() == weights.keys() and all(torch.equal(state[k], weights[k]) for k in weights)
    finally:
        trainer.close()
    written = (tmp_path / "run" / "config.yaml").read_text()  # the values used
    assert "blocks: 2\n" in written and "channels: 8\n" in written and "growth: 4\n" in written
    assert "d_channels: 8\n" in written


def test_srgan_train_fine_tunes_a_basicsr_file_for_two_steps(srgan, photo_dir, tmp_path):
    torch.save({"params_ema": basicsr_rrdbnet(4, 1, 8, grow=4)}, tmp_path / "g.pth")
    settings = finetune_settings(
        photo_dir, tmp_path / "run", f"model.init_from={tmp_path / 'g.pth'}", "model.d_channels=8"
    )
    result = srgan("train", "--config", "finetune_realesrgan_x4", *set_args(settings))
    assert result.returncode == 0, result.stderr
    from srgan.training.state import load_checkpoint

    state = load_checkpoint(tmp_path / "run")
    assert state["step"] == 2 and state["config"]["model"]["blocks"] == 1 and state["config"]["model"]["growth"] == 4
    # a resume reads no init file (its checkpoint wins): the file may be gone
    (tmp_path / "g.pth").unlink()
    resumed = srgan("train", "--resume", tmp_path / "run", "--set", "train.max_steps=3")
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(tmp_path / "run")["step"] == 3


@pytest.mark.parametrize(
    "setting, culprit",
    [
        ("model.blocks=3", "has 2 blocks, the config asks for 3 blocks (model.blocks)"),
        ("model.arch=compact", "has arch rrdb, the config asks for arch compact (model.arch)"),
        ("gan.discriminator=vgg", "has discriminator unet, the config asks for discriminator vgg (gan.discriminator)"),
    ],
)
def test_a_setting_that_disagrees_with_the_files_is_named(setting, culprit, srgan, photo_dir, tmp_path):
    torch.save({"params_ema": basicsr_rrdbnet(4, 2, 8, grow=4)}, tmp_path / "g.pth")
    torch.save({"params": netd(8)}, tmp_path / "d.pth")
    settings = finetune_settings(
        photo_dir, tmp_path / "run", f"model.init_from={tmp_path / 'g.pth'}", f"gan.init_from={tmp_path / 'd.pth'}"
    )
    result = srgan("train", "--config", "finetune_realesrgan_x4", *set_args([*settings, setting]))
    assert_refused(result, culprit)
    assert not (tmp_path / "run").exists()


def test_a_tensor_that_does_not_fit_is_named_by_its_key(srgan, photo_dir, tmp_path):
    state = basicsr_rrdbnet(4, 2, 8, grow=4)
    state["body.1.rdb2.conv3.weight"] = torch.zeros(4, 7, 3, 3)
    torch.save({"params_ema": state}, tmp_path / "g.pth")
    settings = finetune_settings(photo_dir, tmp_path / "run", f"model.init_from={tmp_path / 'g.pth'}")
    result = srgan("train", "--config", "finetune_realesrgan_x4", *set_args(settings))
    assert_refused(result, "body.1.rdb2.conv3.weight has shape [4, 7, 3, 3]")


def test_the_finetune_presets_leave_the_shape_to_the_files():
    """Every key spelled out but the network's shape (and data.train, init files to fill)."""
    for name in ("finetune_realesrgan_x4", "finetune_esrgan_x4"):
        config = load_config(name)
        assert config.model.arch == "rrdb" and config.model.init_from is None
        assert not {"model.blocks", "model.channels", "model.growth"} & config.given_keys
    real = load_config("finetune_realesrgan_x4")
    assert (real.gan.discriminator, real.loss.weights.adversarial, real.train.betas) == ("unet", 0.1, [0.9, 0.99])
    assert real.loss.perceptual.layers == {
        "conv1_2": 0.1,
        "conv2_2": 0.1,
        "conv3_4": 1.0,
        "conv4_4": 1.0,
        "conv5_4": 1.0,
    }


def test_config_show_prints_the_shape_a_finetune_will_take_from_its_file(srgan, tmp_path):
    torch.save({"params_ema": basicsr_rrdbnet(4, 2, 16, grow=8)}, tmp_path / "g.pth")
    shown = srgan("config", "show", "finetune_realesrgan_x4", "--set", f"model.init_from={tmp_path / 'g.pth'}")
    assert shown.returncode == 0, shown
    model = yaml.safe_load(shown.stdout)["model"]
    assert (model["blocks"], model["channels"], model["growth"]) == (2, 16, 8)
    asked = srgan(
        "config",
        "show",
        "finetune_realesrgan_x4",
        "--set",
        f"model.init_from={tmp_path / 'g.pth'}",
        "--set",
        "model.blocks=23",
    )
    assert asked.returncode == 2 and "has 2 blocks, the config asks for 23 blocks (model.blocks)" in asked.stderr, asked


def test_a_network_without_bf16_runs_in_fp32_when_bf16_is_asked():
    """spandrel says which precisions a network runs in; the others fall back to fp32."""
    descriptor = spandrel.ModelLoader().load_from_state_dict(tiny_span())
    descriptor.supports_bfloat16 = False
    generator = SpandrelGenerator(descriptor).eval()
    with torch.no_grad():
        plain = generator(X)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            asked = generator(X)
    assert asked.dtype == torch.float32 and torch.equal(asked, plain)


def test_a_video_runs_through_a_spandrel_network(srgan, tmp_path):
    av = pytest.importorskip("av")
    from test_video import make_clip

    clip = make_clip(tmp_path / "clip.mp4", frames=3, sound=False)
    torch.save(tiny_span(), tmp_path / "4x-SPAN.pth")
    result = srgan("upscale", clip, "-k", tmp_path / "4x-SPAN.pth", "--device", "cpu", "--precision", "fp32")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0].startswith("model: SPAN (through spandrel), x4")
    with av.open(str(tmp_path / "clip_x4.mp4")) as out:
        stream = out.streams.video[0]
        assert (stream.codec_context.width, stream.codec_context.height, stream.frames) == (256, 192, 3)


def test_a_vgg_discriminator_file_brings_its_crop_and_a_given_crop_that_differs_is_named(tmp_path):
    from srgan.models.discriminator_vgg import VGGStyleDiscriminator
    from srgan.training.init_from import read_init_files

    torch.save({"params": VGGStyleDiscriminator(8, 64).state_dict()}, tmp_path / "d.pth")
    (tmp_path / "mine.yaml").write_text(f"gan:\n  discriminator: vgg\n  init_from: {tmp_path / 'd.pth'}\n")
    opened = read_init_files(load_config(str(tmp_path / "mine.yaml")))
    assert (opened.config.data.crop_size, opened.config.model.d_channels) == (64, 8)
    with pytest.raises(
        SrganError, match=r"has crops of 64 px, the config asks for crops of 128 px \(data\.crop_size\)"
    ):
        read_init_files(load_config("esrgan_x4", [f"gan.init_from={tmp_path / 'd.pth'}", "model.d_channels=8"]))


def test_which_keys_were_given_is_recorded_and_is_no_setting():
    config = load_config("finetune_realesrgan_x4", ["model.growth=16"])
    assert {"model.arch", "model.scale", "model.growth", "data.train"} <= config.given_keys
    assert "model.blocks" not in config.given_keys
    with pytest.raises(SrganError, match="unknown key given_keys"):
        load_config("demo", ["given_keys=[model.blocks]"])


def test_evaluate_and_compare_say_what_they_recognised_first(srgan, photo, tmp_path):
    model = tmp_path / "RealESRGAN_x4plus.pth"
    torch.save({"params_ema": basicsr_rrdbnet(4, 1, 8)}, model)
    for args in (("evaluate", photo, "-k", model), ("compare", model, photo, "-o", tmp_path / "cmp.png")):
        result = srgan(*args)
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines()[0].startswith("model: RRDBNet (BasicSR/Real-ESRGAN layout), x4, 1 blocks")
