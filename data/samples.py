"""`builtin:samples`: real photos that scikit-image installs with itself, so
a run needs no download and no data of the user's."""

from __future__ import annotations

from pathlib import Path

from srgan.configs.schema import BUILTIN_SAMPLES as BUILTIN_SAMPLES  # data.train's default, re-exported
from srgan.files.errors import SrganError

# name -> file in skimage/data; the first four train, the last validates.
SAMPLE_FILES = {
    "astronaut": "astronaut.png",
    "coffee": "coffee.png",
    "chelsea": "chelsea.png",
    "hubble_deep_field": "hubble_deep_field.jpg",
    "immunohistochemistry": "ihc.png",
}
TRAIN_SAMPLES = ("astronaut", "coffee", "chelsea", "hubble_deep_field")
VAL_SAMPLES = ("immunohistochemistry",)


def skimage_folder() -> Path:
    """The data folder of the installed scikit-image, which holds the photos."""
    try:
        import skimage.data
    except ImportError:
        raise SrganError(
            "builtin:samples needs scikit-image, which ships the photos: pip install 'srgan[samples]'"
        ) from None
    return Path(skimage.data.__file__).parent


def sample_paths(names: tuple[str, ...] | list[str]) -> list[Path]:
    """The files of the named sample photos inside the installed scikit-image."""
    return [skimage_file(SAMPLE_FILES[name]) for name in names]


def skimage_file(name: str) -> Path:
    """A file of scikit-image's data folder, checked to be there."""
    path = skimage_folder() / name
    if not path.is_file():
        raise SrganError(f"builtin:samples: this scikit-image lacks {name} in {path.parent}")
    return path
