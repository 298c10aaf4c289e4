"""model.init_from and gan.init_from: the weights a run starts from (a
published model to fine-tune, or an earlier run), and the network shape
they bring.

srgan reads them once, before it builds anything: the settings a file
implies (arch, scale, blocks, channels, growth, or each of model.options
for spandrel's architectures; discriminator kind and width) fill the keys
the config left open (Config.given_keys), and it refuses every key the
config gives that disagrees, naming each one. The resolved config, the one
the run folder gets, holds the values used. A resumed run reads neither
file: its checkpoint wins."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from srgan.configs import Config, config_from_dict, config_to_dict
from srgan.configs.schema import ARCH_KEYS, ModelConfig
from srgan.files.errors import SrganError
from srgan.models.build import build_generator
from srgan.models.checkpoint import GeneratorFile, check_state_dict, read_discriminator_file, read_generator_file

# How a mismatch reads: "X has 23 blocks, the config asks for 16 (model.blocks)".
PHRASES = {
    "model.blocks": "{} blocks",
    "model.channels": "{} channels",
    "model.growth": "growth {}",
    "model.scale": "scale {}",
    "model.d_channels": "{} discriminator channels",
    "gan.patchgan_layers": "{} PatchGAN layers",
    "data.crop_size": "crops of {} px",
}


@dataclass
class InitWeights:
    config: Config  # the config with the files' settings filled in
    generator: dict[str, torch.Tensor] | None  # srgan's names, to load strictly
    discriminator: dict[str, torch.Tensor] | None
    notes: list[str]  # what was read and taken, for the run's log


def read_init_files(config: Config) -> InitWeights:
    """The weights of model.init_from and gan.init_from, and the config they
    complete. Raises SrganError naming the file that cannot be read, or
    every key of the config that disagrees with it."""
    settings: dict[str, Any] = {}
    notes: list[str] = []
    generator = discriminator = None
    if config.model.init_from:
        try:
            found = read_generator_file(config.model.init_from)
        except SrganError as error:
            raise SrganError(f"model.init_from: {error}") from None
        implied = model_settings(found.model, found.keys)
        implied = {k: v for k, v in implied.items() if not left_to_config(config, k, v, found)}
        settings |= agreed(config, "model.init_from", config.model.init_from, implied)
        notes.append(f"generator from {config.model.init_from}: {found.description}")
        generator = found.weights
    if config.gan.init_from:
        try:
            recognised = read_discriminator_file(config.gan.init_from)
        except SrganError as error:
            raise SrganError(f"gan.init_from: {error}") from None
        section = {"discriminator": "gan", "patchgan_layers": "gan", "d_channels": "model", "crop_size": "data"}
        implied = {f"{section[key]}.{key}": value for key, value in recognised.model.items()}
        settings |= agreed(config, "gan.init_from", config.gan.init_from, implied)
        notes.append(f"discriminator from {config.gan.init_from}: {recognised.layout}")
        discriminator = recognised.weights
    taken = {key: value for key, value in settings.items() if key not in config.given_keys}
    if taken:
        notes.append("taken from the init files: " + ", ".join(f"{k}={v}" for k, v in taken.items()))
    return InitWeights(with_settings(config, taken), generator, discriminator, notes)


def model_settings(model: ModelConfig, keys: tuple[str, ...]) -> dict[str, Any]:
    """The dotted model.* settings of `keys`; model.options one key an
    option (model.options.feature_channels), so that each option the config
    gives is checked and each it leaves out is taken on its own."""
    settings: dict[str, Any] = {}
    for key in keys:
        if key == "options":
            settings |= {f"model.options.{name}": value for name, value in model.options.items()}
        else:
            settings[f"model.{key}"] = getattr(model, key)
    return settings


def left_to_config(config: Config, dotted: str, theirs: Any, found: GeneratorFile) -> bool:
    """Whether the config's value of an option it gives, other than the
    file's, builds a network that holds the file's tensors just as well: an
    option the weights do not fix (a training-only drop_path_rate, an
    img_size spandrel assumes), which the config then sets. Every other
    key the file implies must agree with the config."""
    if not dotted.startswith("model.options.") or dotted not in config.given_keys:
        return False
    ours = current(config, dotted)
    if ours == theirs:
        return False
    model = dataclasses.replace(found.model, options={**found.model.options, dotted.split(".")[2]: ours})
    try:
        with torch.device("meta"):  # shapes only
            network = build_generator(model)
        check_state_dict(found.weights, network, dotted)
    except SrganError:
        return False
    return True


def agreed(config: Config, key: str, path: str, implied: dict[str, Any]) -> dict[str, Any]:
    """`implied`, once every key the config gives agrees with it; raises
    SrganError listing every key that does not."""
    mismatches = []
    for name, theirs in implied.items():
        ours = current(config, name)
        if name in config.given_keys and ours != theirs:
            phrase = PHRASES.get(name, name.split(".")[-1] + " {}")
            mismatches.append(f"{path} has {phrase.format(theirs)}, the config asks for {phrase.format(ours)} ({name})")
    if mismatches:
        raise SrganError(f"{key}: " + "; ".join(mismatches))
    return implied


def current(config: Config, dotted: str) -> Any:
    section, name, *option = dotted.split(".")
    value = getattr(getattr(config, section), name)
    return value.get(option[0]) if option else value


def with_settings(config: Config, settings: dict[str, Any]) -> Config:
    """`config` with `settings` (dotted keys) applied, checked again as a
    whole (a scale from the file must still suit data.crop_size, ...)."""
    if not settings:
        return config
    raw = config_to_dict(config)
    for dotted, value in settings.items():
        section, name, *option = dotted.split(".")
        if option:  # model.options.<name>
            raw[section].setdefault(name, {})[option[0]] = value
        else:
            raw[section][name] = value
    arch = raw["model"]["arch"]
    for name, archs in ARCH_KEYS.items():  # an arch from the file drops other archs' keys left at their defaults
        if arch not in archs and f"model.{name}" not in config.given_keys:
            raw["model"].pop(name, None)
    resolved = config_from_dict(raw, "the config completed from model.init_from / gan.init_from")
    resolved.given_keys = config.given_keys
    return resolved


def start_from(init: InitWeights, generator: nn.Module, discriminator: nn.Module) -> None:
    """Load the init weights into the built networks. Every name and shape
    must match: raises SrganError naming the first that does not."""
    for key, path, weights, module in (
        ("model.init_from", init.config.model.init_from, init.generator, generator),
        ("gan.init_from", init.config.gan.init_from, init.discriminator, discriminator),
    ):
        if weights is not None:
            check_state_dict(weights, module, f"{key}: {path}")
            module.load_state_dict(weights)
