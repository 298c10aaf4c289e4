"""Generators trained with leftthomas/SRGAN: its `netG_epoch_*.pth` files are
a bare state dict of the same SRResNet under other names.

    block1.{0,1}               head.{0,1}          9x9 conv, PReLU
    block2 .. block{K+1}.*     body.{0..K-1}.*     K residual blocks (leftthomas: 5)
    block{K+2}.{0,1}           body_end.{0,1}      3x3 conv, BN
    block{K+3}.{i}.{conv,prelu}  upsample.{i}.*    log2(scale) x2 stages
    block{K+3}.{n}             tail                9x9 conv after the n stages

Both networks end in (tanh(x) + 1) / 2, so the mapped weights give the same
outputs.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from srgan.configs.checks import LIMITS
from srgan.files.errors import SrganError, first_line
from srgan.models.generator import Generator


def is_leftthomas_state_dict(state: Any) -> bool:
    """Whether `state` is a leftthomas/SRGAN generator's state dict, by its keys: a head `block1.0.weight`
    and a first residual block `block2.conv1.weight`."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        return False
    keys = {_strip_module(k) for k in state}
    return {"block1.0.weight", "block1.1.weight", "block2.conv1.weight"} <= keys


def generator_from_leftthomas(state: dict[str, torch.Tensor], origin: str = "state dict") -> Generator:
    """srgan's Generator with the weights of a leftthomas/SRGAN state dict,
    its scale, block count and channels read from the keys and shapes.
    Raises SrganError for sizes over srgan's limits and for keys or shapes
    that do not fit an SRResNet."""
    state = {_strip_module(k): v for k, v in state.items()}
    blocks = 0
    while f"block{blocks + 2}.conv1.weight" in state:
        blocks += 1
    end, last = f"block{blocks + 2}", f"block{blocks + 3}"
    stages = 0
    while f"{last}.{stages}.conv.weight" in state:
        stages += 1
    channels = state["block1.0.weight"].shape[0]
    for key, value in (("model.blocks", blocks), ("model.channels", channels)):
        if value > LIMITS[key]:
            raise SrganError(
                f"{origin}: a leftthomas/SRGAN generator of {value} {key.split('.')[1]}, more than "
                f"srgan's limit of {LIMITS[key]}"
            )
    if stages not in (1, 2, 3) or f"{last}.{stages}.weight" not in state or f"{end}.0.weight" not in state:
        raise SrganError(
            f"{origin}: a leftthomas/SRGAN state dict without the expected "
            f"{end}.0 (conv), {last}.N.conv (x2 stages) and {last}.N (last conv) keys"
        )
    renamed = {}
    for key, tensor in state.items():
        new = _rename(key, blocks, stages)
        if new is None:
            raise SrganError(f"{origin}: unexpected key {key!r} for a leftthomas/SRGAN generator")
        renamed[new] = tensor
    generator = Generator(2**stages, blocks, channels)
    try:
        generator.load_state_dict(renamed)
    except RuntimeError as error:
        raise SrganError(
            f"{origin}: leftthomas/SRGAN weights that do not fit an SRResNet ({first_line(error)})"
        ) from None
    return generator


def _rename(key: str, blocks: int, stages: int) -> str | None:
    match = re.fullmatch(r"block(\d+)\.(.+)", key)
    if match is None:
        return None
    index, rest = int(match.group(1)), match.group(2)
    if index == 1:
        return f"head.{rest}"
    if 2 <= index < blocks + 2:
        return f"body.{index - 2}.{rest}"
    if index == blocks + 2:
        return f"body_end.{rest}"
    if index == blocks + 3:
        stage, _, param = rest.partition(".")
        if stage == str(stages):
            return f"tail.{param}"
        return f"upsample.{rest}"
    return None


def _strip_module(key: str) -> str:
    # A DataParallel-wrapped model saves its names with this prefix.
    return key[len("module.") :] if key.startswith("module.") else key
