"""Configuration: the typed schema, the YAML presets beside it, and the loader."""

from srgan.configs.loader import (
    config_from_dict,
    config_to_dict,
    config_to_yaml,
    load_config,
    preset_names,
    resume_config,
)
from srgan.configs.schema import Config

__all__ = [
    "Config",
    "config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "load_config",
    "preset_names",
    "resume_config",
]
