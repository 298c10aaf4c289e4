"""The community's generator files: which layout a state dict has, read from
its keys and shapes, and its weights under srgan's names. One recogniser a
layout, tried in order; each returns the model settings the tensors imply
and the renamed state dict (models/checkpoint.py builds and checks the
network). Nothing here reads a file or runs code.

    BasicSR / Real-ESRGAN RRDBNet: conv_first, body.0.rdb1.conv1, conv_body
        -> rrdb, the names as they are
    ESRGAN 2018, xinntao/ESRGAN's RRDBNet: conv_first, RRDB_trunk.0.RDB1.conv1, trunk_conv
        -> rrdb: RRDB_trunk.N.RDBr.convK -> body.N.rdbr.convK, trunk_conv -> conv_body,
           upconvK -> conv_upK, HRconv -> conv_hr
    ESRGAN 2018, the original release's sequential net (RRDB_ESRGAN_x4.pth): model.0,
    model.1.sub.0.RDB1.conv1.0
        -> rrdb: model.0 -> conv_first, model.1.sub.N.RDBr.convK.0 -> body.N.rdbr.convK,
           model.1.sub.<blocks> -> conv_body; of the numbered layers after the trunk the
           upsampling convs (model.3, model.6) -> conv_up1, conv_up2, the last two
           (model.8, model.10) -> conv_hr, conv_last
    SRVGGNetCompact: body.0 (a conv), body.1 (PReLU slopes) -> compact, the names as they are
    leftthomas/SRGAN: block1.0, block2.conv1 -> srresnet (models/leftthomas.py)

The ESRGAN renamings are spandrel's (chaiNNer-org/spandrel, architectures/
ESRGAN: `_to_old_arch`), read the other way. BasicSR's weights sit under
`params_ema` or `params`, other trainers' under `state_dict`, `model`,
`net` and the like (WRAPPER_KEYS), or at the top; a DataParallel run's
names start with `module.`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from srgan.configs.checks import LIMITS
from srgan.configs.schema import OWN_ARCHS
from srgan.files.errors import SrganError
from srgan.models.leftthomas import generator_from_leftthomas, is_leftthomas_state_dict


class NotAnSrganGenerator(SrganError):
    """A state dict that no srgan architecture holds: no layout fits its
    keys, or one does but with a network srgan's cannot hold (an x8
    RRDBNet). Inference may still run it through spandrel; training cannot."""


@dataclass
class Recognised:
    layout: str  # "RRDBNet (BasicSR/Real-ESRGAN layout)"
    model: dict[str, Any]  # model.* settings read from the tensors: arch, scale, blocks, channels, ...
    weights: dict[str, torch.Tensor]  # under srgan's names


# Where trainers keep a generator's tensors inside the file, in the order
# unwrap_state_dict tries them: BasicSR's EMA weights first (what Real-ESRGAN's inference
# loads), then its plain ones, then the other trainers' keys (the ones
# spandrel's loader also unwraps: traiNNer, neosr, plain PyTorch scripts).
WRAPPER_KEYS = ("params_ema", "params-ema", "params", "model_state_dict", "state_dict", "model", "net", "netG")
PREFIXES = ("module.", "netG.")  # DataParallel's, and old ESRGAN trainers'


def unwrap_state_dict(state: Any) -> dict[str, torch.Tensor] | None:
    """The tensors of a bare generator file: under the first of WRAPPER_KEYS
    the file has, under its one key when it has only one, or the dict
    itself, without a prefix of PREFIXES that every name shares. Returns
    None when the file holds no such dict of names to tensors."""
    if isinstance(state, dict):
        for key in WRAPPER_KEYS:
            if isinstance(state.get(key), dict) and state[key]:
                state = state[key]
                break
        else:
            if len(state) == 1 and isinstance(next(iter(state.values())), dict):
                state = next(iter(state.values()))
    if not isinstance(state, dict) or not state:
        return None
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        return None
    for prefix in PREFIXES:
        if all(k.startswith(prefix) for k in state):
            state = {k.removeprefix(prefix): v for k, v in state.items()}
    return state


def recognise(state: dict[str, torch.Tensor], origin: str) -> Recognised:
    """The first layout whose keys `state` has, with its settings and
    renamed weights; NotAnSrganGenerator when none fits or the one that does
    describes a network srgan's architectures cannot hold."""
    for recogniser in RECOGNISERS:
        found = recogniser(state, origin)
        if found is not None:
            return found
    first = ", ".join(list(state)[:3])
    raise NotAnSrganGenerator(
        f"{origin}: its keys ({first}, ...) fit no generator srgan knows (expected an srgan checkpoint, or "
        "the weights of a BasicSR/Real-ESRGAN RRDBNet, ESRGAN, SRVGGNetCompact or leftthomas/SRGAN generator)"
    )


# ---- the recognisers --------------------------------------------------------------


def basicsr_rrdb(state: dict[str, torch.Tensor], origin: str) -> Recognised | None:
    if not {"conv_first.weight", "body.0.rdb1.conv1.weight", "conv_body.weight"} <= state.keys():
        return None
    return rrdb_settings(state, "RRDBNet (BasicSR/Real-ESRGAN layout)", origin)


def esrgan_trunk(state: dict[str, torch.Tensor], origin: str) -> Recognised | None:
    if not {"conv_first.weight", "RRDB_trunk.0.RDB1.conv1.weight", "trunk_conv.weight"} <= state.keys():
        return None
    renamed = {}
    for key, tensor in state.items():
        key = re.sub(r"^RRDB_trunk\.(\d+)\.RDB(\d)\.", r"body.\1.rdb\2.", key)
        key = re.sub(r"^trunk_conv\.", "conv_body.", key)
        key = re.sub(r"^upconv(\d+)\.", r"conv_up\1.", key)
        key = re.sub(r"^HRconv\.", "conv_hr.", key)
        renamed[key] = tensor
    return rrdb_settings(renamed, "RRDBNet (ESRGAN 2018 layout, RRDB_trunk)", origin)


def esrgan_sequential(state: dict[str, torch.Tensor], origin: str) -> Recognised | None:
    if not {"model.0.weight", "model.1.sub.0.RDB1.conv1.0.weight"} <= state.keys():
        return None
    blocks = count_indices(state, r"model\.1\.sub\.(\d+)\.RDB1\.conv1\.0\.weight")
    # the numbered layers after the trunk: upsampling convs, then the HR conv and the last conv
    after = sorted({int(m.group(1)) for k in state if (m := re.fullmatch(r"model\.(\d+)\.weight", k))} - {0})
    names = {0: "conv_first"}
    if len(after) >= 2:
        names |= {index: f"conv_up{i + 1}" for i, index in enumerate(after[:-2])}
        names |= {after[-2]: "conv_hr", after[-1]: "conv_last"}
    renamed = {}
    for key, tensor in state.items():
        key = re.sub(rf"^model\.1\.sub\.{blocks}\.", "conv_body.", key)
        key = re.sub(r"^model\.1\.sub\.(\d+)\.RDB(\d)\.conv(\d)\.0\.", r"body.\1.rdb\2.conv\3.", key)
        m = re.fullmatch(r"model\.(\d+)\.(weight|bias)", key)
        if m and int(m.group(1)) in names:
            key = f"{names[int(m.group(1))]}.{m.group(2)}"
        renamed[key] = tensor
    return rrdb_settings(renamed, "RRDBNet (ESRGAN 2018 layout, model.N)", origin)


def rrdb_settings(state: dict[str, torch.Tensor], layout: str, origin: str) -> Recognised:
    """The settings of the srgan RRDBNet that `state` holds. srgan's has two
    x2 upsampling convs and takes the input as it is (x4) or pixel-unshuffled
    by 2 (x2, 12 channels) or 4 (x1, 48 channels); any other raises
    NotAnSrganGenerator."""
    stages = count_indices(state, r"conv_up(\d+)\.weight", start=1)
    channels, in_channels = conv_shape(state, "conv_first.weight", origin)[:2]
    unshuffle = {3: 1, 12: 2, 48: 4}.get(in_channels)
    out = conv_shape(state, "conv_last.weight", origin) if "conv_last.weight" in state else None
    model = {
        "arch": "rrdb",
        "scale": 4 // (unshuffle or 1),
        "blocks": count_indices(state, r"body\.(\d+)\.rdb1\.conv1\.weight"),
        "channels": channels,
        "growth": conv_shape(state, "body.0.rdb1.conv1.weight", origin)[0],
    }
    within_limits(model, layout, origin)
    if stages != 2 or unshuffle is None or out is None or out[0] != 3:
        raise NotAnSrganGenerator(
            f"{origin}: an {layout} with {stages} upsampling convs and {in_channels} input channels; srgan's "
            "RRDBNet has 2 (x4, and x2 or x1 on a pixel-unshuffled input of 12 or 48 channels) and an RGB output"
        )
    return Recognised(layout, model, state)


def compact(state: dict[str, torch.Tensor], origin: str) -> Recognised | None:
    first, slopes = state.get("body.0.weight"), state.get("body.1.weight")
    if first is None or slopes is None or first.ndim != 4 or slopes.ndim != 1:
        return None
    last = count_indices(state, r"body\.(\d+)\.weight") - 1
    out = conv_shape(state, f"body.{last}.weight", origin)[0]
    scale = math.isqrt(out // 3)
    model = {"arch": "compact", "scale": scale, "blocks": (last - 2) // 2, "channels": first.shape[0]}
    within_limits(model, "SRVGGNetCompact", origin)
    if first.shape[1] != 3 or out != 3 * scale * scale or last % 2:
        raise NotAnSrganGenerator(
            f"{origin}: an SRVGGNetCompact of {first.shape[1]} input and {out} output channels; srgan's takes RGB "
            "and ends in 3 x scale^2 channels"
        )
    return Recognised("SRVGGNetCompact (Real-ESRGAN layout)", model, state)


def leftthomas(state: dict[str, torch.Tensor], origin: str) -> Recognised | None:
    if not is_leftthomas_state_dict(state):
        return None
    # check the head's shape before generator_from_leftthomas reads its width from it
    conv_shape({k.removeprefix("module."): v for k, v in state.items()}, "block1.0.weight", origin)
    generator = generator_from_leftthomas(state, origin)
    model = {
        "arch": "srresnet",
        "scale": generator.scale,
        "blocks": generator.blocks,
        "channels": generator.channels,
        "norm": "batch",
        "residual": "none",
    }
    return Recognised("SRResNet (leftthomas/SRGAN layout)", model, generator.state_dict())


RECOGNISERS: tuple[Callable[[dict[str, torch.Tensor], str], Recognised | None], ...] = (
    basicsr_rrdb,
    esrgan_trunk,
    esrgan_sequential,
    compact,
    leftthomas,
)


def conv_shape(state: dict[str, torch.Tensor], key: str, origin: str, ndim: int = 4) -> torch.Size:
    """The shape of a weight a recogniser reads sizes from. Raises SrganError
    unless it has a layer's dims (4 for a conv, 2 for a linear layer), none 0."""
    shape = state[key].shape
    if len(shape) != ndim or 0 in shape:
        layer = {4: "a conv's weight", 2: "a linear layer's weight"}[ndim]
        raise SrganError(f"{origin}: {key} has shape {list(shape)}; {layer} has {ndim} dims, none of them 0")
    return shape


def within_limits(model: dict[str, Any], layout: str, origin: str) -> None:
    """Raise SrganError when a size a recogniser read exceeds srgan's limits
    (configs/checks.py), before anything is built from it: also before
    spandrel builds a network srgan's architectures do not hold, from the
    same few shapes."""
    for key in ("blocks", "channels", "growth"):
        limit = LIMITS[f"model.{key}"]
        if model.get(key, 0) > limit:
            raise SrganError(
                f"{origin}: an {layout} of {model[key]} {key} (model.{key}), more than srgan's limit of {limit}"
            )


def count_indices(state: dict[str, torch.Tensor], pattern: str, start: int = 0) -> int:
    """How many consecutive indices from `start` the keys matching `pattern` (one group) have."""
    found = {int(m.group(1)) for key in state if (m := re.fullmatch(pattern, key))}
    count = 0
    while start + count in found:
        count += 1
    return count


def describe(layout: str, model: dict[str, Any]) -> str:
    """'RRDBNet (BasicSR/Real-ESRGAN layout), x4, 23 blocks, 64 channels'."""
    if model.get("arch") not in OWN_ARCHS:  # spandrel's architectures: their options are too many for a line
        return f"{layout}, x{model['scale']}"
    units = "convs" if model.get("arch") == "compact" else "blocks"
    text = f"{layout}, x{model['scale']}, {model['blocks']} {units}, {model['channels']} channels"
    if model.get("arch") == "rrdb":
        text += f", growth {model['growth']}"
    return text


# ---- discriminators (gan.init_from) -------------------------------------------------


def recognise_discriminator(state: dict[str, torch.Tensor], origin: str) -> Recognised:
    """Real-ESRGAN's UNetDiscriminatorSN (RealESRGAN_x4plus_netD.pth), BasicSR's
    VGGStyleDiscriminator, a spectrally normalised PatchGAN or srgan's own, by their keys; `model` holds the
    gan.discriminator, model.d_channels (and, for vgg, data.crop_size) they imply.
    Raises SrganError for other keys, and for BasicSR's 256 px VGG variant."""
    if {"conv0.weight", "conv1.weight_orig", "conv9.weight"} <= state.keys():
        width = conv_shape(state, "conv0.weight", origin)[0]
        return Recognised("UNetDiscriminatorSN (Real-ESRGAN)", {"discriminator": "unet", "d_channels": width}, state)
    if {"conv0_0.weight", "conv4_1.weight", "linear1.weight"} <= state.keys():
        if "conv5_0.weight" in state:
            raise SrganError(
                f"{origin}: BasicSR's VGGStyleDiscriminator for 256 px crops (conv5_0); srgan's has the five "
                "stages of its 128 px one"
            )
        width = conv_shape(state, "conv0_0.weight", origin)[0]
        side = math.isqrt(conv_shape(state, "linear1.weight", origin, ndim=2)[1] // (8 * width))
        settings = {"discriminator": "vgg", "d_channels": width, "crop_size": 32 * side}
        return Recognised("VGGStyleDiscriminator (BasicSR)", settings, state)
    if "model.0.weight_orig" in state:  # pix2pix's NLayerDiscriminator, spectrally normalised
        convs = [key for key in state if key.startswith("model.") and key.endswith(".weight_orig")]
        width = conv_shape(state, "model.0.weight_orig", origin)[0]
        settings = {"discriminator": "patchgan", "d_channels": width, "patchgan_layers": len(convs) - 1}
        return Recognised("PatchGAN with spectral norm (pix2pix's n-layer)", settings, state)
    if {"features.0.weight", "classifier.2.weight"} <= state.keys():
        width = conv_shape(state, "features.0.weight", origin)[0]
        return Recognised("srgan's SRGAN discriminator", {"discriminator": "srgan", "d_channels": width}, state)
    first = ", ".join(list(state)[:3])
    raise SrganError(
        f"{origin}: its keys ({first}, ...) fit no discriminator srgan knows (expected Real-ESRGAN's "
        "UNetDiscriminatorSN: conv0, conv1.weight_orig, ...; BasicSR's VGGStyleDiscriminator: conv0_0, ..., "
        "linear1; a PatchGAN: model.0.weight_orig, ...; or an srgan checkpoint)"
    )
