"""`builtin:samples`: real photos that scikit-image installs with itself, so
a run needs no download and no data of the user's; and `srgan samples`,
which writes them and the held-out set into a folder."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image

from srgan.configs.schema import BUILTIN_SAMPLES as BUILTIN_SAMPLES  # data.train's default, re-exported
from srgan.data.heldout import HELDOUT_PHOTOS, SYNTHETIC, synthetic_images
from srgan.files import check_output, write_bytes
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
    """The files of the named sample photos inside the installed scikit-image.
    Raises SrganError when scikit-image or one of the photos is missing."""
    return [skimage_file(SAMPLE_FILES[name]) for name in names]


def skimage_file(name: str) -> Path:
    """A file of scikit-image's data folder; raises SrganError when it is not there."""
    path = skimage_folder() / name
    if not path.is_file():
        raise SrganError(f"builtin:samples: this scikit-image lacks {name} in {path.parent}")
    return path


def write_samples(folder: Path, force: bool = False) -> Iterator[Path]:
    """`srgan samples`: the built-in photos copied into FOLDER/train and
    FOLDER/val as they are, and the held-out set (srgan.data.heldout) as RGB
    PNGs into FOLDER/heldout/photos and FOLDER/heldout/synthetic. Yields each
    path once it is written. It checks every target before it writes
    anything: an existing one without `force` raises SrganError, and nothing
    is written."""
    # (source, target): a photo copied as it is, or, for the held-out set, a
    # photo or a drawn image written as an RGB PNG (what evaluate scores).
    plan: list[tuple[Path, Path]] = [
        (source, folder / part / f"{name}{source.suffix}")
        for part, names in (("train", TRAIN_SAMPLES), ("val", VAL_SAMPLES))
        for name, source in zip(names, sample_paths(names), strict=True)
    ]
    heldout = folder / "heldout"
    photo_targets = {name: heldout / "photos" / f"{name}.png" for name in HELDOUT_PHOTOS}
    synthetic_targets = {name: heldout / "synthetic" / f"{name}.png" for name in SYNTHETIC}
    for source, target in plan:  # check all before decoding or drawing any: a refusal writes nothing
        check_output(target, force, inputs=(source,))
    for target in (*photo_targets.values(), *synthetic_targets.values()):
        check_output(target, force)
    for source, target in plan:
        write_bytes(target, source.read_bytes(), overwrite=force, inputs=(source,))
        yield target
    rgb = [
        (np.asarray(Image.open(skimage_file(file)).convert("RGB")), photo_targets[name])
        for name, file in HELDOUT_PHOTOS.items()
    ]
    rgb += [(pixels, synthetic_targets[name]) for name, pixels in synthetic_images().items()]
    for pixels, target in rgb:
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="PNG")
        write_bytes(target, buffer.getvalue(), overwrite=force)
        yield target
