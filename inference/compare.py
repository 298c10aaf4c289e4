"""A side-by-side picture, bicubic | SR | original, of an HR photo whose LR
version is made here: the quickest look at what a model does."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn

from srgan.configs.schema import RealEsrganDegradation
from srgan.data import bicubic_downscale, load_rgb8
from srgan.data.datasets import low_resolution
from srgan.data.degradations import named_generator
from srgan.data.images import IMAGE_EXTENSIONS
from srgan.data.pairing import fit_hr_to_lr
from srgan.data.sheets import side_by_side
from srgan.files import check_output
from srgan.files.errors import SrganError, first_line
from srgan.files.reading import not_found
from srgan.inference.imageio import write_png
from srgan.inference.tiles import OutOfMemoryAtFloor
from srgan.inference.upscale import upscale_rgb8
from srgan.metrics import ImageScores
from srgan.models import Runtime, SRGenerator
from srgan.models.interpolate import blend_generators

log = logging.getLogger("srgan")


def mod_crop(image: np.ndarray, scale: int) -> np.ndarray:
    """Drop the last rows and columns so both sides are multiples of `scale`."""
    height, width = image.shape[:2]
    return image[: height - height % scale, : width - width % scale]


def bicubic_upscale(lr: np.ndarray, scale: int) -> np.ndarray:
    height, width = lr.shape[:2]
    return np.asarray(Image.fromarray(lr).resize((width * scale, height * scale), Image.Resampling.BICUBIC))


def scored_hr(
    hr: np.ndarray, given_lr: np.ndarray | None, scale: int, hr_path: Path, lr_path: Path | None
) -> np.ndarray | None:
    """The HR the scores compare with: cut to fit a given LR (None when their
    sizes disagree: fit_hr_to_lr warns, naming both files), or else cropped
    to a multiple of `scale`."""
    if given_lr is None or lr_path is None:
        return mod_crop(hr, scale)
    return fit_hr_to_lr(hr, given_lr, scale, (hr_path, lr_path))


def model_input(
    hr: np.ndarray,
    given_lr: np.ndarray | None,
    scale: int,
    degrade: tuple[RealEsrganDegradation, int] | None,
    name: str,
) -> np.ndarray:
    """The HxWx3 uint8 LR the model and bicubic take: the given one, or the
    HR's, by bicubic or degraded by (settings, seed) from a generator fixed
    by the seed and `name`."""
    if given_lr is not None:
        return given_lr
    if degrade is None:
        return bicubic_downscale(hr, scale)
    settings, seed = degrade
    lr = low_resolution(hr, scale, settings, named_generator(seed, name))
    return (lr * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


def compare_picture(
    generator: SRGenerator,
    runtime: Runtime,
    image_path: Path,
    out_path: Path,
    force: bool = False,
    scores: ImageScores | None = None,
    model: str = "",
    lr_path: Path | None = None,
    degrade: tuple[RealEsrganDegradation, int] | None = None,
    blend: tuple[nn.Module, tuple[float, ...]] | None = None,
) -> dict[str, dict[str, float]]:
    """Write bicubic | SR | original for one HR photo to `out_path`, each panel
    labelled with its `scores` (default: Y-channel PSNR), and return those
    scores by panel. `model`, what the checkpoint was recognised as, is logged
    once the photo passes its checks. The LR that bicubic and the model take
    is a bicubic downscale of the HR; or `lr_path`'s image (or the image of
    the same stem in that folder); or, with `degrade` (settings, seed), the HR
    degraded as `srgan evaluate --degrade` degrades it. Raises SrganError for
    an existing output without `force`, a file that does not decode, an LR
    whose size does not match the HR's, and a photo too small for the scale.
    With `blend` (a generator B of the generator's shape, and alphas), the
    SR panel is a strip: one panel per alpha, the generator blended with B
    there (models/interpolate.py), each labelled "alpha 0.5" with its scores,
    returned under that label; SrganError for a B of another shape."""
    if lr_path is not None:
        lr_path = lr_partner(image_path, lr_path)
    check_output(out_path, force, inputs=(image_path,) if lr_path is None else (image_path, lr_path))  # before the work
    scores = scores or ImageScores(["psnr"], runtime.device, "--metrics")
    given_lr = None if lr_path is None else _decode(lr_path)
    hr = scored_hr(_decode(image_path), given_lr, generator.scale, image_path, lr_path)
    if hr is None:
        raise SrganError(f"--lr {lr_path}: its size does not agree with {image_path}'s at x{generator.scale}")
    if min(hr.shape[:2]) < 4 * generator.scale:
        raise SrganError(f"{image_path}: too small to compare at x{generator.scale}")
    if model:
        log.info("model: %s", model)
    generator.eval()
    lr = model_input(hr, given_lr, generator.scale, degrade, image_path.stem)
    bicubic = bicubic_upscale(lr, generator.scale)
    networks = {"sr": generator}
    if blend is not None:
        other, alphas = blend
        networks = {f"alpha {a:g}": blended_copy(generator, other, a) for a in alphas}

    def chw(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(a)).permute(2, 0, 1)

    border = generator.scale
    result = {"bicubic": scores(chw(bicubic), chw(hr), border)}
    panels = [labelled(bicubic, f"bicubic {score_label(result['bicubic'])}")]
    for name, network in networks.items():
        try:
            sr = upscale_rgb8(network, lr, runtime)
        except OutOfMemoryAtFloor as error:  # the tiler does not know the file's name
            raise SrganError(f"{image_path}: {error}") from None
        result[name] = scores(chw(sr), chw(hr), border)
        panels.append(labelled(sr, f"{'SR' if name == 'sr' else name} {score_label(result[name])}"))
    panels.append(labelled(hr, "original"))
    write_png(side_by_side(panels), out_path, overwrite=force, inputs=(image_path,))
    return result


def blended_copy(generator: SRGenerator, other: nn.Module, alpha: float) -> SRGenerator:
    """A copy of `generator` blended with `other` at `alpha` (the generator itself at 0)."""
    if alpha == 0.0:
        return generator
    return blend_generators(copy.deepcopy(generator), other, alpha, "--blend", "the checkpoint").eval()


def score_label(scores: dict[str, float]) -> str:
    """`28.43 dB, SSIM 0.8104, LPIPS 0.2311`: a panel's scores, PSNR first in dB."""
    parts = []
    for name, value in scores.items():
        parts.append(f"{value:.2f} dB" if name == "psnr" else f"{name.upper().replace('_', '-')} {value:.4f}")
    return ", ".join(parts)


def _decode(path: Path) -> np.ndarray:
    try:
        return load_rgb8(path)
    except SrganError:
        raise
    except Exception as error:
        raise SrganError(f"{path}: cannot be decoded as an image ({first_line(error)})") from None


def lr_partner(image_path: Path, lr: Path) -> Path:
    """The LR partner of `image_path` for `--lr`: `lr` itself when it is a file, else the one image of the
    same stem in the folder `lr`; raises SrganError when `lr` is missing or holds no such image or several."""
    if lr.is_file():
        return lr
    if not lr.is_dir():
        raise SrganError(f"--lr {not_found(lr, 'file or folder')}")
    found = [p for p in lr.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.stem == image_path.stem]
    if len(found) != 1:
        raise SrganError(f"--lr {lr}: expected one image named {image_path.stem}.* in it, found {len(found)}")
    return found[0]


def labelled(panel: np.ndarray, label: str) -> np.ndarray:
    """`panel` with `label` in white on a dark box in its top-left corner
    (the scores are computed before, on the unlabelled pixels)."""
    image = Image.fromarray(panel)
    draw = ImageDraw.Draw(image)
    size = max(10, min(panel.shape[:2]) // 16)
    left, top, right, bottom = draw.textbbox((0, 0), label, font_size=size)
    pad = max(2, size // 4)
    draw.rectangle((0, 0, right + 2 * pad, bottom + 2 * pad), fill=(0, 0, 0))
    draw.text((pad, pad), label, fill=(255, 255, 255), font_size=size)
    return np.asarray(image)
