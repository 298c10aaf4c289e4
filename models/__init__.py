"""The networks (the generators: SRResNet, RRDBNet, SRVGGNetCompact and
spandrel's SR architectures; the discriminators), their checkpoints, and the
device/precision they run in."""

from srgan.models.build import SRGenerator, build_generator, resolve_architecture
from srgan.models.checkpoint import (
    generator_from_checkpoint,
    resolve_checkpoint_path,
    save_checkpoint,
)
from srgan.models.discriminator import Discriminator, build_discriminator
from srgan.models.generator import Generator
from srgan.models.runtime import Runtime, resolve_runtime

__all__ = [
    "Discriminator",
    "Generator",
    "Runtime",
    "SRGenerator",
    "build_discriminator",
    "build_generator",
    "generator_from_checkpoint",
    "resolve_architecture",
    "resolve_checkpoint_path",
    "resolve_runtime",
    "save_checkpoint",
]
