"""The generator a config describes: every architecture srgan trains, in one
`match` (no registry: a reader finds them all here)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from srgan.models.compact import SRVGGNetCompact
from srgan.models.generator import Generator
from srgan.models.rrdb import RRDBNet
from srgan.models.spandrel_generator import SpandrelGenerator

if TYPE_CHECKING:
    from srgan.configs.schema import ModelConfig

# Any generator srgan runs, the type inference, validation and the tiles take:
# the three architectures it trains, and a network spandrel recognises in a
# community file, which upscale, evaluate, compare and video run
# (models/spandrel_generator.py).
SRGenerator = Generator | RRDBNet | SRVGGNetCompact | SpandrelGenerator

# The model.* keys that fix the shapes of the networks' weights (each arch has
# only its own of them: configs.schema.ARCH_KEYS); DISCRIMINATOR_KEYS shape the
# discriminator, the others the generator.
ARCHITECTURE_KEYS = ("arch", "scale", "blocks", "channels", "growth", "d_channels", "norm", "residual", "res_scale")
DISCRIMINATOR_KEYS = ("d_channels",)


def build_generator(model: ModelConfig) -> SRGenerator:
    """SRResNet, RRDBNet or SRVGGNetCompact, by `model.arch`, with fresh weights.
    Raises ValueError for any other arch."""
    match model.arch:
        case "srresnet":
            return Generator.from_config(model)
        case "rrdb":
            return RRDBNet.from_config(model)
        case "compact":
            return SRVGGNetCompact.from_config(model)
    raise ValueError(f"unknown model.arch {model.arch!r}")  # the loader lets none through
