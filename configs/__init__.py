"""Configuration: the typed schema, the YAML presets beside it, and the loader."""

from srgan.configs.errors import SrganError, first_line
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
    "SrganError",
    "config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "first_line",
    "load_config",
    "preset_names",
    "resume_config",
]
