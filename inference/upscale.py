"""Applying a trained generator to image files."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from srgan.configs.errors import SrganError
from srgan.data.images import IMAGE_EXTENSIONS, find_images, load_rgb8
from srgan.models import Generator, Runtime

log = logging.getLogger("srgan")


@torch.inference_mode()
def upscale_rgb8(generator: Generator, image: np.ndarray, runtime: Runtime) -> np.ndarray:
    """HxWx3 uint8 -> (sH)x(sW)x3 uint8."""
    x = torch.from_numpy(np.array(image)).permute(2, 0, 1)[None].to(runtime.device).float() / 255
    with runtime.autocast():
        y = generator(x)
    return y[0].float().clamp(0, 1).mul(255).round().byte().permute(1, 2, 0).cpu().numpy()


def collect_inputs(inputs: list[Path]) -> list[Path]:
    """Files as given; folders expanded to the images below them."""
    files: list[Path] = []
    for item in inputs:
        if item.is_dir():
            found = find_images(item)
            if not found:
                raise SrganError(f"{item}: a folder with no images ({', '.join(IMAGE_EXTENSIONS)})")
            files.extend(found)
        elif item.is_file():
            files.append(item)
        else:
            raise SrganError(f"{item}: no such file or folder")
    return files


def output_path(source: Path, scale: int, output: Path | None, single: bool) -> Path:
    """`<stem>_x<scale>.png` beside the input or in the folder `output`;
    `output` itself when it names a .png file and there is one input."""
    name = f"{source.stem}_x{scale}.png"
    if output is None:
        return source.with_name(name)
    if single and output.suffix.lower() == ".png" and not output.is_dir():
        return output
    return output / name


def write_png_atomically(image: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    Image.fromarray(image).save(tmp, format="PNG")
    os.replace(tmp, path)


def upscale_files(
    generator: Generator, runtime: Runtime, inputs: list[Path], output: Path | None, force: bool
) -> list[Path]:
    """Upscale every input; returns the files written."""
    files = collect_inputs(inputs)
    resolved_inputs = {f.resolve() for f in files}
    plan = [(f, output_path(f, generator.scale, output, len(files) == 1)) for f in files]
    for source, target in plan:
        if target.resolve() in resolved_inputs:
            raise SrganError(f"{target}: would overwrite an input image; choose another -o")
        if target.exists() and not force:
            raise SrganError(f"{target}: exists (use --force to overwrite)")
    generator.eval()
    written = []
    for source, target in plan:
        try:
            image = load_rgb8(source)
        except Exception as error:
            raise SrganError(f"{source}: cannot be decoded as an image ({error.__class__.__name__})") from None
        write_png_atomically(upscale_rgb8(generator, image, runtime), target)
        written.append(target)
    return written
