"""The generator a config describes: every architecture srgan trains, in one
`match` (no registry: a reader finds them all here)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from srgan.configs.schema import OWN_ARCHS
from srgan.models.compact import SRVGGNetCompact
from srgan.models.generator import Generator
from srgan.models.rrdb import RRDBNet
from srgan.models.spandrel_generator import SpandrelGenerator

if TYPE_CHECKING:
    from srgan.configs.schema import Config, ModelConfig

# Any generator srgan runs, the type inference, validation and the tiles take:
# srgan's own three architectures, and a network of spandrel's (one srgan
# trains, or one spandrel recognises in a community file: models/spandrel_generator.py).
SRGenerator = Generator | RRDBNet | SRVGGNetCompact | SpandrelGenerator

# The model.* keys that fix the shapes of the networks' weights (each arch has
# only its own of them: configs.schema.ARCH_KEYS); DISCRIMINATOR_KEYS shape the
# discriminator, the others the generator.
ARCHITECTURE_KEYS = (
    "arch",
    "scale",
    "blocks",
    "channels",
    "growth",
    "d_channels",
    "norm",
    "residual",
    "res_scale",
    "options",
)
DISCRIMINATOR_KEYS = ("d_channels",)


def build_generator(model: ModelConfig) -> SRGenerator:
    """SRResNet, RRDBNet or SRVGGNetCompact, by `model.arch`, or spandrel's
    network of that name built from model.options (models/spandrel_archs.py),
    with fresh weights. Raises SrganError for an architecture or an option
    spandrel's constructors do not have."""
    match model.arch:
        case "srresnet":
            return Generator.from_config(model)
        case "rrdb":
            return RRDBNet.from_config(model)
        case "compact":
            return SRVGGNetCompact.from_config(model)
    # spandrel imports all its architectures (seconds): only a run of one of them pays for it
    from srgan.models.spandrel_archs import build_spandrel_generator, resolve_options

    return build_spandrel_generator(resolve_options(model))


def resolve_architecture(config: Config) -> Config:
    """`config` with model.options completed by the defaults of the spandrel
    architecture it names, as a run's config.yaml records them (srgan's own
    architectures: `config` itself). Raises SrganError for an unknown
    architecture, a scale it does not build or an option it does not take."""
    if config.model.arch in OWN_ARCHS:
        return config
    from srgan.models.spandrel_archs import resolve_options  # spandrel: as above

    return dataclasses.replace(config, model=resolve_options(config.model))
