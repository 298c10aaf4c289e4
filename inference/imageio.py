"""Image files in and out of the upscaler, in kind: 8- or 16-bit, RGB or
grayscale, with or without alpha, upright per EXIF; written atomically."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps

from srgan.data.images import check_pixels
from srgan.files import write_file
from srgan.files.errors import SrganError, first_line
from srgan.files.reading import reading_regular

log = logging.getLogger("srgan")

OUTPUT_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}
ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")
# What a broken or foreign file raises while Pillow opens or decodes it
# (UnidentifiedImageError and truncated data are OSErrors).
DECODE_ERRORS = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)


@dataclass
class Picture:
    """Decoded pixels. `color` is HxWx3 (RGB) or HxW (grayscale), uint8 or
    uint16; `alpha`, when there is one, is HxW of the same dtype."""

    color: np.ndarray
    alpha: np.ndarray | None = None
    icc_profile: bytes | None = None

    @property
    def gray(self) -> bool:
        return self.color.ndim == 2

    @property
    def bits(self) -> int:
        return 16 if self.color.dtype == np.uint16 else 8


def has_alpha(path: Path) -> bool:
    """From the header only; False for a file that does not open (it fails later, when read)."""
    try:
        if _png_header(path)[1] in (4, 6):  # gray+alpha, RGBA: also the 16-bit ones Pillow misreads
            return True
        with Image.open(path) as im:
            return im.mode in ALPHA_MODES or "transparency" in im.info
    except DECODE_ERRORS:
        return False


def read_picture(path: Path) -> Picture:
    """Decode any mode Pillow opens: palette becomes RGB (RGBA with its
    transparency), CMYK and the like RGB; 16-bit PNGs (any colour type) and
    I;16 TIFFs stay 16-bit; the EXIF orientation is applied. Raises
    SrganError for a path that is not a regular file, an image over the
    pixel limits, and a file that does not decode."""
    reading_regular(path, "an image")
    try:
        header = _png_header(path)
        if header[0] == 16:
            check_pixels(path, header[2], header[3])  # before libpng allocates what the header claims
            return _read_png16(path)
        with Image.open(path) as im:
            check_pixels(path, *im.size)
            icc_profile = im.info.get("icc_profile")
            upright = ImageOps.exif_transpose(im)
        return _picture_from_pil(upright, icc_profile)
    except DECODE_ERRORS as error:
        raise SrganError(f"{path}: cannot be decoded as an image ({first_line(error)})") from None


def _png_header(path: Path) -> tuple[int | None, int | None, int, int]:
    """(bit depth, colour type, width, height) from a PNG's IHDR, which the
    format puts first; (None, None, 0, 0) for other files."""
    with open(path, "rb") as f:
        head = f.read(26)
    if len(head) < 26 or not head.startswith(PNG_SIGNATURE) or head[12:16] != b"IHDR":
        return None, None, 0, 0
    return head[24], head[25], int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _read_png16(path: Path) -> Picture:
    """Pillow keeps only 8 bits of 16-bit RGB and gray+alpha PNGs:
    torchvision's libpng decoder gives all 16 (and raises RuntimeError on a broken file)."""
    from torchvision.io import ImageReadMode, decode_png, read_file  # loads only for a 16-bit PNG

    try:
        with warnings.catch_warnings():  # it warns that uint16 support is limited in torch
            warnings.simplefilter("ignore")
            pixels = decode_png(read_file(str(path)), ImageReadMode.UNCHANGED).permute(1, 2, 0).numpy()
    except RuntimeError as error:
        raise OSError(str(error)) from None
    with Image.open(path) as im:
        icc_profile = im.info.get("icc_profile")
        orientation = im.getexif().get(0x0112, 1)
    pixels = _exif_upright(pixels, orientation)
    channels = pixels.shape[2]
    color = pixels[:, :, 0] if channels in (1, 2) else pixels[:, :, :3]
    alpha = pixels[:, :, channels - 1] if channels in (2, 4) else None
    return Picture(np.ascontiguousarray(color), None if alpha is None else np.ascontiguousarray(alpha), icc_profile)


def _exif_upright(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """What ImageOps.exif_transpose does to an image, done to an HxWxC array."""
    if orientation in (5, 6, 7, 8):
        pixels = np.swapaxes(pixels, 0, 1)  # transpose, then flip as the remaining turn needs
        flips = {5: (), 6: (1,), 7: (0, 1), 8: (0,)}[orientation]
    else:
        flips = {2: (1,), 3: (0, 1), 4: (0,)}.get(orientation, ())
    return np.flip(pixels, axis=flips) if flips else pixels


def _picture_from_pil(im: Image.Image, icc_profile: bytes | None) -> Picture:
    mode = im.mode
    if mode.startswith("I;16"):
        return Picture(np.asarray(im).astype(np.uint16), None, icc_profile)
    if mode in ("I", "F"):
        return Picture(_wide_gray(im), None, icc_profile)
    if "transparency" in im.info and mode in ("P", "L", "RGB"):
        im = im.convert("LA" if mode == "L" else "RGBA")  # a transparent colour becomes alpha
    mode = im.mode
    if mode in ("1", "L"):
        return Picture(np.asarray(im.convert("L")), None, icc_profile)
    if mode in ("LA", "La"):
        pixels = np.asarray(im.convert("LA"))
        return Picture(pixels[:, :, 0].copy(), pixels[:, :, 1].copy(), icc_profile)
    if mode in ALPHA_MODES:
        pixels = np.asarray(im.convert("RGBA"))
        return Picture(np.ascontiguousarray(pixels[:, :, :3]), pixels[:, :, 3].copy(), icc_profile)
    return Picture(np.asarray(im.convert("RGB")), None, icc_profile)


def _wide_gray(im: Image.Image) -> np.ndarray:
    """32-bit integer or float grayscale: to 8 bits when the values fit in
    0..255, else to 16 bits; floats up to 1.0 are taken as [0, 1]."""
    values = np.asarray(im, dtype=np.float64)
    peak = float(values.max()) if values.size else 0.0
    if im.mode == "F" and peak <= 1.0:
        return np.clip(np.round(values * 65535), 0, 65535).astype(np.uint16)
    if peak <= 255:
        return np.clip(np.round(values), 0, 255).astype(np.uint8)
    return np.clip(np.round(values), 0, 65535).astype(np.uint16)


def resize(pixels: np.ndarray, size: tuple[int, int], resample: int) -> np.ndarray:
    """HxW or HxWx3, uint8 or uint16, to `size` (width, height) with Pillow;
    16-bit planes one at a time (Pillow has no 16-bit RGB)."""
    if pixels.dtype == np.uint8:
        return np.asarray(Image.fromarray(pixels).resize(size, resample))
    if pixels.ndim == 2:
        return np.asarray(Image.fromarray(pixels).resize(size, resample)).astype(np.uint16)
    planes = [resize(np.ascontiguousarray(pixels[:, :, c]), size, resample) for c in range(pixels.shape[2])]
    return np.stack(planes, axis=2)


def write_picture(picture: Picture, path: Path, quality: int = 95, **checks) -> None:
    """PNG (8 or 16 bits, alpha kept), JPEG or WebP (8 bits; JPEG drops alpha)
    by the file's extension, written atomically (`checks`: those of
    srgan.files.write_file, overwrite / inputs / folder). Raises SrganError
    for another extension, and for what write_file refuses."""
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise SrganError(f"{path}: expected a .png, .jpg or .webp file name")
    if fmt == "PNG" and picture.bits == 16:

        def save(f: BinaryIO) -> None:
            write_png16(f, picture.color, picture.alpha)

        if picture.icc_profile:
            log.warning("%s: the colour profile is not carried into a 16-bit PNG", path)
    else:
        alpha = picture.alpha
        if fmt == "JPEG" and alpha is not None:
            log.warning("%s: JPEG has no alpha channel; written without it", path)
            alpha = None
        pixels = _to_8bit(picture.color)
        image = Image.fromarray(pixels if alpha is None else np.dstack([pixels, _to_8bit(alpha)]))
        if fmt == "WEBP" and image.mode in ("L", "LA"):
            image = image.convert("RGBA" if image.mode == "LA" else "RGB")  # WebP has no grayscale
        options: dict = {"quality": quality} if fmt != "PNG" else {}
        if picture.icc_profile:
            options["icc_profile"] = picture.icc_profile

        def save(f: BinaryIO) -> None:
            image.save(f, format=fmt, **options)

    write_file(path, save, **checks)


def write_png(image: np.ndarray, path: Path, **checks) -> None:
    """An 8-bit HxWx3 (or HxW) array as a PNG file, written atomically."""
    write_file(Path(path), lambda f: Image.fromarray(image).save(f, format="PNG"), **checks)


def write_png16(f: BinaryIO, color: np.ndarray, alpha: np.ndarray | None = None) -> None:
    """A 16-bit PNG (Pillow writes none but grayscale) through pypng, a row at a time."""
    import png  # pypng, needed only to write 16-bit PNGs

    height, width = color.shape[:2]
    gray = color.ndim == 2

    def rows():
        for y in range(height):
            samples = [color[y].reshape(width, -1)]
            if alpha is not None:
                samples.append(alpha[y].reshape(width, 1))
            yield np.concatenate(samples, axis=1).reshape(-1)

    png.Writer(width, height, greyscale=gray, alpha=alpha is not None, bitdepth=16).write(f, rows())


def _to_8bit(pixels: np.ndarray) -> np.ndarray:
    """uint16 -> uint8 rounded (v / 257), a band of rows at a time to keep the temporaries small."""
    if pixels.dtype == np.uint8:
        return pixels
    out = np.empty(pixels.shape, dtype=np.uint8)
    for start in range(0, pixels.shape[0], 512):
        band = pixels[start : start + 512].astype(np.uint32)
        out[start : start + 512] = (band + 128) // 257
    return out


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
