"""The generator a config describes: every architecture srgan trains, in one
`match` (no registry: a reader finds them all here)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from srgan.configs.schema import ModelConfig


def build_generator(model: ModelConfig) -> nn.Module:
    """SRResNet, RRDBNet or SRVGGNetCompact, by `model.arch`, with fresh weights."""
    match model.arch:
        case "srresnet":
            from srgan.models.generator import Generator

            return Generator.from_config(model)
        case "rrdb":
            from srgan.models.rrdb import RRDBNet

            return RRDBNet.from_config(model)
        case "compact":
            from srgan.models.compact import SRVGGNetCompact

            return SRVGGNetCompact.from_config(model)
    raise ValueError(f"unknown model.arch {model.arch!r}")  # the loader lets none through
