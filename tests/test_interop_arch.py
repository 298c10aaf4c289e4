"""srgan's RRDBNet and SRVGGNetCompact are the community's, weight for
weight: a state dict in BasicSR's / Real-ESRGAN's layout (written here
from their published layer names and shapes, random values) loads into
srgan's network with strict=True, and spandrel (chaiNNer's loader, which
runs its own copy of each architecture) computes the same outputs from it.
The same for the state dict an srgan run saves, also as safetensors.
Nothing is downloaded."""

from __future__ import annotations

import pytest
import spandrel  # a dev dependency: the oracle, so its absence is a failure, not a skip
import torch

from conftest import skimage_photo, tiny_overrides
from srgan.configs import load_config
from srgan.models.checkpoint import load_generator
from srgan.models.compact import SRVGGNetCompact
from srgan.models.rrdb import RRDBNet
from srgan.training import train
from srgan.training.state import load_checkpoint


def conv(out_channels: int, in_channels: int, rng: torch.Generator, std: float) -> dict[str, torch.Tensor]:
    return {
        "weight": torch.randn(out_channels, in_channels, 3, 3, generator=rng) * std,
        "bias": torch.randn(out_channels, generator=rng) * std,
    }


def basicsr_rrdbnet(scale: int, blocks: int, feat: int, grow: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    """BasicSR's RRDBNet(num_in_ch=3, num_out_ch=3, scale, num_feat, num_block,
    num_grow_ch) state dict: x2 and x1 take the input pixel-unshuffled (12 or 48 channels)."""
    rng = torch.Generator().manual_seed(seed)
    layers = {"conv_first": conv(feat, 3 * {4: 1, 2: 4, 1: 16}[scale], rng, 0.05)}
    for b in range(blocks):
        for r in (1, 2, 3):
            for i in range(1, 6):
                out = feat if i == 5 else grow
                layers[f"body.{b}.rdb{r}.conv{i}"] = conv(out, feat + (i - 1) * grow, rng, 0.05)
    for name in ("conv_body", "conv_up1", "conv_up2", "conv_hr"):
        layers[name] = conv(feat, feat, rng, 0.05)
    layers["conv_last"] = conv(3, feat, rng, 0.05)
    return {f"{layer}.{kind}": value for layer, params in layers.items() for kind, value in params.items()}


def realesrgan_compact(scale: int, convs: int, feat: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Real-ESRGAN's SRVGGNetCompact(num_in_ch=3, num_out_ch=3, num_feat,
    num_conv, upscale, act_type='prelu') state dict: body = conv, PReLU(feat),
    `convs` x (conv, PReLU), conv to 3 x scale^2."""
    rng = torch.Generator().manual_seed(seed)
    state = {}
    index = 0
    for c_in in [3] + [feat] * convs:
        for kind, value in conv(feat, c_in, rng, 0.1).items():
            state[f"body.{index}.{kind}"] = value
        state[f"body.{index + 1}.weight"] = torch.rand(feat, generator=rng) * 0.5  # PReLU slopes
        index += 2
    for kind, value in conv(3 * scale * scale, feat, rng, 0.1).items():
        state[f"body.{index}.{kind}"] = value
    return state


def photo(height: int, width: int) -> torch.Tensor:
    pixels = skimage_photo("astronaut")[60 : 60 + height, 180 : 180 + width]
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1)[None].float() / 255


def spandrel_output(state: dict[str, torch.Tensor], x: torch.Tensor, architecture: str, scale: int) -> torch.Tensor:
    descriptor = spandrel.ModelLoader().load_from_state_dict(state)
    assert descriptor.architecture.id == architecture and descriptor.scale == scale
    with torch.no_grad():
        return descriptor.model.eval()(x)


def assert_same_function(ours: torch.nn.Module, state: dict, architecture: str, x: torch.Tensor) -> None:
    with torch.no_grad():
        mine = ours.eval()(x)
    theirs = spandrel_output(state, x, architecture, ours.scale)
    assert mine.shape == theirs.shape == (1, 3, x.shape[2] * ours.scale, x.shape[3] * ours.scale)
    assert mine.abs().mean() > 1e-2  # a network that computes something
    torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("scale", [4, 2, 1])
def test_basicsr_rrdbnet_weights_load_strictly_and_compute_what_spandrel_computes(scale):
    """64 channels as the presets (3 blocks, not 23: seconds, not a minute); in
    x1 on sides that are not multiples of the unshuffle factor (both pad by
    reflection)."""
    blocks, size = (3, (20, 24)) if scale == 4 else (2, (30, 37))
    state = basicsr_rrdbnet(scale, blocks, 64)
    ours = RRDBNet(scale, blocks, 64, 32)
    ours.load_state_dict(state, strict=True)
    assert_same_function(ours, state, "ESRGAN", photo(*size))


@pytest.mark.parametrize("scale, convs", [(4, 32), (4, 16), (2, 4), (1, 4), (3, 4)])
def test_realesrgan_compact_weights_load_strictly_and_compute_what_spandrel_computes(scale, convs):
    """32 convs: realesr-general-x4v3's size; 16: realesr-animevideov3's."""
    state = realesrgan_compact(scale, convs, 64)
    ours = SRVGGNetCompact(scale, convs, 64)
    ours.load_state_dict(state, strict=True)
    assert_same_function(ours, state, "Compact", photo(21, 26))


@pytest.mark.parametrize("arch, extra", [("rrdb", ["model.growth=32"]), ("compact", ["model.blocks=2"])])
def test_the_weights_an_srgan_run_saves_load_in_spandrel(arch, extra, photo_dir, tmp_path):
    """A tiny run's checkpoint: its generator state dict, as it is and through
    a .safetensors file, is recognised by spandrel and computes what srgan's
    network computes. (spandrel's RRDBNet has ESRGAN's growth 32 fixed.)"""
    from safetensors.torch import save_file

    run = train(load_config("demo", tiny_overrides(photo_dir, tmp_path / "run", f"model.arch={arch}", *extra)))
    state = load_checkpoint(run)["generator"]
    architecture = {"rrdb": "ESRGAN", "compact": "Compact"}[arch]
    assert_same_function(load_generator(run), state, architecture, photo(20, 24))
    path = tmp_path / "generator.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in state.items()}, str(path))
    descriptor = spandrel.ModelLoader().load_from_file(str(path))
    x = photo(20, 24)
    with torch.no_grad():
        torch.testing.assert_close(descriptor.model.eval()(x), load_generator(run).eval()(x), atol=1e-5, rtol=0)
