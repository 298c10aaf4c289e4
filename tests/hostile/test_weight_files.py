"""Weight files built to break the loader, tiny, on every command that reads
one: `upscale`, `evaluate`, `compare` and `export` (-k / the source; a file
srgan's recognisers refuse goes on to spandrel there), `model.init_from` and
`gan.init_from` (read by `config show` exactly as `train` reads them, before
anything is built). Each is refused in one line naming the key, exit 2,
before any computation on a tensor: an expanded (stride-0) tensor of 2^40
elements from a 1.6 KB file, a 0-dim tensor where a shape is read, float8,
integer, bool or complex weights, a width of 0, channels past srgan's limits
(which hold on spandrel's path too), one wrong shape."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from conftest import assert_refused, bare_checkpoint, run_cli, set_args, skimage_photo
from srgan.models.discriminator import Discriminator
from srgan.models.discriminator_unet import UNetDiscriminatorSN
from srgan.models.discriminator_vgg import VGGStyleDiscriminator
from srgan.models.generator import Generator
from test_interop_arch import basicsr_rrdbnet, realesrgan_compact
from test_upscale import to_leftthomas

safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("spandrel")


def rrdb() -> dict[str, torch.Tensor]:
    return basicsr_rrdbnet(4, 1, 8)


def compact() -> dict[str, torch.Tensor]:
    return realesrgan_compact(4, 2, 8)


def leftthomas() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return to_leftthomas(Generator(2, 1, 8).state_dict(), blocks=1, stages=1)


def expanded(*shape: int) -> torch.Tensor:
    """One stored float seen as `shape` (stride 0 everywhere): torch.save keeps it so."""
    return torch.zeros(1).expand(*shape)


def x8_rrdb(channels: int) -> dict[str, torch.Tensor]:
    """An RRDBNet layout with a third upsampling conv (x8: beyond srgan's archs,
    so its recogniser hands it on) whose conv_first declares `channels`: spandrel
    reads its width there and would build the whole network at it."""
    state = rrdb()
    state["conv_first.weight"] = torch.zeros(channels, 3, 1, 1)
    state["conv_up3.weight"], state["conv_up3.bias"] = state["conv_up2.weight"].clone(), state["conv_up2.bias"].clone()
    return state


def span() -> dict[str, torch.Tensor]:
    """A SPAN (an architecture only spandrel knows), 8 channels wide."""
    from spandrel.architectures.SPAN import SPAN

    torch.manual_seed(0)
    return SPAN(num_in_ch=3, num_out_ch=3, feature_channels=8, upscale=4).state_dict()


def with_key(state: dict[str, torch.Tensor], key: str, value: torch.Tensor) -> dict[str, torch.Tensor]:
    assert key in state, key
    return {**state, key: value}


def srgan_checkpoint_of(transform):
    """An srgan checkpoint (x4, 1 block, 8 channels) whose generator weights went through `transform`."""

    def save(path):
        bare_checkpoint(path)
        state = torch.load(path, weights_only=True)
        state["generator"] = {k: transform(k, v) for k, v in state["generator"].items()}
        torch.save(state, path)

    return save


def last_compact_conv() -> str:
    return f"body.{len(compact()) // 3 * 2}.weight"  # each conv has weight, bias, and a PReLU


# name -> (the file's state dict, or a function that writes it, and its suffix; what the refusal names,
# or {command: that, "*": the others'})
GENERATOR_FILES = {
    "stride-0, 2^40 elements, unknown keys": (lambda: {"x.weight": expanded(2**20, 2**20)}, ".pth", "x.weight"),
    "stride-0 conv_first of the right shape": (
        lambda: with_key(rrdb(), "conv_first.weight", expanded(8, 3, 3, 3)),
        ".pth",
        "conv_first.weight",
    ),
    "stride-0 in an srgan checkpoint": (
        srgan_checkpoint_of(lambda k, v: v.flatten()[:1].expand(v.shape) if k == "head.0.weight" else v),
        ".pt",
        "head.0.weight",
    ),
    "x8 RRDB layout declaring 600 channels": (lambda: x8_rrdb(600), ".safetensors", "512"),
    "SPAN layout declaring 600 channels": (
        lambda: with_key(span(), "conv_1.sk.weight", torch.zeros(600, 3, 1, 1)),
        ".pth",
        "spandrel would build a network of more than",  # model.init_from reads it through spandrel too
    ),
    "0-dim conv_first": (lambda: with_key(rrdb(), "conv_first.weight", torch.tensor(1.0)), ".pth", "conv_first"),
    "0-dim RRDB growth": (
        lambda: with_key(rrdb(), "body.0.rdb1.conv1.weight", torch.tensor(1.0)),
        ".pth",
        "body.0.rdb1.conv1.weight",
    ),
    "0-dim compact last conv": (
        lambda: with_key(compact(), last_compact_conv(), torch.tensor(1.0)),
        ".pth",
        last_compact_conv(),
    ),
    "0-dim leftthomas head": (
        lambda: with_key(leftthomas(), "block1.0.weight", torch.tensor(1.0)),
        ".pth",
        "block1.0.weight",
    ),
    "float8 RRDB (.pth)": (lambda: {k: v.to(torch.float8_e4m3fn) for k, v in rrdb().items()}, ".pth", "float8"),
    "F8_E4M3 compact (.safetensors)": (
        lambda: {k: v.to(torch.float8_e4m3fn) for k, v in compact().items()},
        ".safetensors",
        "float8",
    ),
    "float8 srgan checkpoint": (
        srgan_checkpoint_of(lambda k, v: v.to(torch.float8_e4m3fn) if v.is_floating_point() else v),
        ".pt",
        "float8",
    ),
    "int32 compact": (lambda: {k: (v * 100).to(torch.int32) for k, v in compact().items()}, ".pth", "int32"),
    "bool compact": (lambda: {k: v > 0 for k, v in compact().items()}, ".pth", "bool"),
    "complex64 compact": (lambda: {k: v.to(torch.complex64) for k, v in compact().items()}, ".pth", "complex64"),
    "one wrong shape in an RRDB": (
        lambda: with_key(rrdb(), "body.0.rdb1.conv2.weight", torch.zeros(8, 3, 3, 3)),
        ".safetensors",
        "body.0.rdb1.conv2.weight has shape [8, 3, 3, 3]",
    ),
}

COMMANDS = ("upscale", "evaluate", "compare", "export", "model.init_from")


def write(tmp_path, name, build, suffix):
    path = tmp_path / f"hostile{suffix}"
    if suffix == ".pt":
        build(path)
    elif suffix == ".safetensors":
        safetensors_torch.save_file({k: v.contiguous() for k, v in build().items()}, str(path))
    else:
        torch.save(build(), path)
    assert path.stat().st_size < 2_000_000, name  # a small file, whatever it declares
    return path


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hr")
    Image.fromarray(skimage_photo("coffee")[100:124, 200:224]).save(folder / "cup.png")
    return folder / "cup.png"


def command(name: str, weights, image, tmp_path) -> list:
    return {
        "upscale": ["upscale", image, "-k", weights, "-o", tmp_path / "out.png", "--device", "cpu"],
        "evaluate": ["evaluate", image.parent, "-k", weights, "--device", "cpu"],
        "compare": ["compare", weights, image, "-o", tmp_path / "sheet.png", "--device", "cpu"],
        "export": ["export", weights, "-o", tmp_path / "out.safetensors"],
        "model.init_from": ["config", "show", "--set", f"model.init_from={weights}"],
    }[name]


@pytest.mark.parametrize("case", GENERATOR_FILES)
def test_a_hostile_generator_file_is_refused_in_one_line_on_every_path(case, image, tmp_path):
    build, suffix, culprit = GENERATOR_FILES[case]
    path = write(tmp_path, case, build, suffix)
    for name in COMMANDS:
        result = run_cli(*command(name, path, image, tmp_path))
        assert_refused(result, culprit.get(name, culprit["*"]) if isinstance(culprit, dict) else culprit)
        assert str(path) in result.stderr.strip().splitlines()[-1], (name, result.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # nothing written, not even a temporary


def vgg_d() -> dict[str, torch.Tensor]:
    return VGGStyleDiscriminator(8, 128).state_dict()


DISCRIMINATOR_FILES = {
    "0-dim UNet conv0": (
        lambda: with_key(UNetDiscriminatorSN(8).state_dict(), "conv0.weight", torch.tensor(1.0)),
        "conv0.weight",
    ),
    "0-dim srgan features.0": (
        lambda: with_key(Discriminator(8).state_dict(), "features.0.weight", torch.tensor(1.0)),
        "features.0.weight",
    ),
    "0-dim VGG linear1": (lambda: with_key(vgg_d(), "linear1.weight", torch.tensor(1.0)), "linear1.weight"),
    "VGG of width 0": (lambda: with_key(vgg_d(), "conv0_0.weight", torch.zeros(0, 3, 3, 3)), "conv0_0.weight"),
    "float8 VGG": (
        lambda: {k: v.to(torch.float8_e4m3fn) if v.is_floating_point() else v for k, v in vgg_d().items()},
        "float8",
    ),
    "stride-0 UNet conv0": (
        lambda: with_key(UNetDiscriminatorSN(8).state_dict(), "conv0.weight", expanded(8, 3, 3, 3)),
        "conv0.weight",
    ),
    "complex srgan D": (
        lambda: {
            k: v.to(torch.complex64) if v.is_floating_point() else v for k, v in Discriminator(8).state_dict().items()
        },
        "complex64",
    ),
}


@pytest.mark.parametrize("case", DISCRIMINATOR_FILES)
def test_a_hostile_discriminator_file_is_refused_in_one_line_by_gan_init_from(case, image, tmp_path):
    build, culprit = DISCRIMINATOR_FILES[case]
    path = write(tmp_path, case, build, ".pth")
    kind = {"conv0": "unet", "features.0": "srgan"}.get(next(iter(build())).rsplit(".", 1)[0], "vgg")
    # the settings the file would bring, given: what is refused is the file itself
    given = [f"gan.discriminator={kind}", "model.d_channels=8", "data.crop_size=128", f"gan.init_from={path}"]
    result = run_cli("config", "show", *set_args(given))
    assert_refused(result, culprit)
    assert "gan.init_from" in result.stderr and str(path) in result.stderr, result.stderr
