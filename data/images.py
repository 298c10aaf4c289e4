"""Finding image files and decoding them to 8-bit RGB arrays."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from srgan.files.errors import SrganError, first_line
from srgan.files.inputs import note_listed
from srgan.files.reading import reading_regular

log = logging.getLogger("srgan")

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")

# The most pixels an input image may have: Pillow's own refusal threshold
# (twice its MAX_IMAGE_PIXELS: about 13,400 x 13,400). check_pixels checks it
# from the header, before any decoder allocates what the header claims.
MAX_IMAGE_PIXELS = 2 * 89_478_485


def check_pixels(path: Path, width: int, height: int) -> None:
    if width * height > MAX_IMAGE_PIXELS:
        raise SrganError(
            f"{path}: {width}x{height} is {width * height:,} pixels, more than the limit of "
            f"{MAX_IMAGE_PIXELS:,} (a decompression bomb, or an image to cut into parts first)"
        )


def find_images(folder: Path) -> list[Path]:
    """Every file below `folder` with an image extension, in a stable order
    (each an input of the command: srgan.files.inputs)."""
    note_listed(folder, IMAGE_EXTENSIONS, "an image")
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the header, after EXIF orientation. Raises
    SrganError for a path that is no regular file or an image over
    MAX_IMAGE_PIXELS, and Pillow's own errors for a non-image. It reads no
    pixels, so it takes a PNG's EXIF only when it comes before the image
    data (Pillow's getexif would decode the whole PNG to look for one after
    it)."""
    reading_regular(path, "an image")
    with Image.open(path) as im:
        width, height = im.size
        check_pixels(path, width, height)
        if im.format == "PNG" and "exif" not in im.info:
            orientation = 1
        else:
            orientation = im.getexif().get(0x0112, 1)  # 5..8 turn the picture by 90 degrees
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def load_rgb8(path: Path) -> np.ndarray:
    """Decode to an HxWx3 uint8 array, upright per EXIF, whatever the mode:
    grayscale, palette, RGBA (alpha dropped), CMYK, 16-bit. Raises as
    image_size does, and Pillow's own errors for a file broken past its
    header."""
    reading_regular(path, "an image")
    with Image.open(path) as im:
        check_pixels(path, *im.size)
        im = ImageOps.exif_transpose(im)
        return to_rgb8(im)


def try_load_rgb8(path: Path) -> np.ndarray | None:
    """load_rgb8, or None with one warning for a file that cannot be decoded."""
    try:
        return load_rgb8(path)
    except Exception as error:  # PIL raises many types for a broken file
        log.warning("skipping %s: cannot be decoded (%s)", path, first_line(error))
        return None


def to_rgb8(im: Image.Image) -> np.ndarray:
    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        # 16-bit, 32-bit or float grayscale: PIL's convert would clip, so scale.
        values = np.asarray(im, dtype=np.float64)
        peak = float(values.max()) if values.size else 0.0
        if im.mode == "F" and peak <= 1.0:
            full_scale = 1.0
        else:
            full_scale = 65535.0 if peak > 255 else 255.0
        gray = np.clip(np.round(values * (255.0 / full_scale)), 0, 255).astype(np.uint8)
        return np.repeat(gray[:, :, None], 3, axis=2)
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")  # palette transparency, then drop it like any alpha
    return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()
