"""Upscaling image and video files: plan every output first (refusing to
overwrite inputs or existing files), then each image in kind (alpha,
grayscale, 16-bit), tiled within a memory budget, and each video frame by
frame (inference/video.py); a bad file is reported and skipped."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from srgan.data.images import IMAGE_EXTENSIONS, find_images
from srgan.files import check_output
from srgan.files.errors import SrganError
from srgan.files.inputs import note_read
from srgan.files.reading import not_found
from srgan.inference.fused import fuse_for_inference
from srgan.inference.imageio import OUTPUT_FORMATS, Picture, has_alpha, read_picture, resize, write_picture
from srgan.inference.options import UpscaleOptions
from srgan.inference.tile_pad import tile_pad
from srgan.inference.tiles import OutOfMemoryAtFloor, auto_tile, check_upscale_memory, needs_tiles, upscale_tiled
from srgan.inference.video import (
    VIDEO_CONTAINERS,
    VIDEO_EXTENSIONS,
    find_videos,
    is_video,
    require_av,
    upscale_video,
    video_outputs,
)
from srgan.models import Runtime, SRGenerator
from srgan.models.runtime import is_out_of_memory

log = logging.getLogger("srgan")


@dataclass
class UpscaleReport:
    written: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)  # (input, why)
    inputs: int = 0  # files tried (a video with --compare writes two)


def upscale_files(
    generator: SRGenerator,
    runtime: Runtime,
    inputs: list[Path],
    output: Path | None,
    options: UpscaleOptions,
    model: str = "",
) -> UpscaleReport:
    """Upscale every input and return the report of what was written and what
    failed. Problems with the command (missing inputs, overwrites, name
    clashes) raise SrganError before any work; an image or video that cannot
    be read or written is logged, skipped and listed in the report. Once the
    command's checks pass, the first line logged names `model` (what the
    checkpoint was recognised as) and where the tiles' context comes from:
    given, measured on the network or cached (inference/tile_pad.py)."""
    files = collect_inputs(inputs)
    if any(is_video(source) for source in files):
        require_av()  # before any work: a missing extra is a mistake in the command, not in one file
    plan = plan_outputs(files, output, generator.scale, options)
    network = inference_network(generator, runtime)
    if options.tile == 0:
        tiles = "no tiles (--tile 0)"  # the pad is measured only if CUDA's memory makes an image run in tiles
    else:
        chosen = tile_pad(network, runtime, options.tile_pad)
        options, tiles = dataclasses.replace(options, tile_pad=chosen.pad), chosen.describe()
    if model:
        log.info("model: %s; %s", model, tiles)
    log.info(
        "upscaling %s x%s, %s", count_label(files), scale_label(generator.scale, options.outscale), runtime.describe()
    )
    report = UpscaleReport(inputs=len(plan))
    for source, target in tqdm(plan, unit="image", desc="upscale", dynamic_ncols=True):
        try:
            if is_video(source):
                report.written.extend(upscale_video(network, runtime, source, target, options))
                continue
            picture = read_picture(source)
            height, width = picture.color.shape[:2]
            check_upscale_memory(source, width, height, picture.color.itemsize, generator.scale, options.outscale)
            result = upscale_picture(network, picture, runtime, options, progress=source.name)
            write_picture(result, target, options.quality, overwrite=options.force, inputs=(source,))
        except (MemoryError, RuntimeError) as failure:
            if not is_out_of_memory(failure):
                raise
            error = SrganError(f"{source}: out of memory while upscaling it (try --tile 256 or a smaller --outscale)")
            log.warning("%s; skipped", error)
            report.failed.append((source, str(error)))
            continue
        except OutOfMemoryAtFloor as floor:  # the tiler does not know the file's name
            error = SrganError(f"{source}: {floor}")
            log.warning("%s; skipped", error)
            report.failed.append((source, str(error)))
            continue
        except SrganError as error:
            log.warning("%s; skipped", error)
            report.failed.append((source, str(error)))
            continue
        report.written.append(target)
    return report


def upscale_picture(
    generator: SRGenerator, picture: Picture, runtime: Runtime, options: UpscaleOptions, progress: str | None = None
) -> Picture:
    """The picture `scale` (or `outscale`) times larger, in kind: the same
    bit depth, grayscale as grayscale, alpha kept."""
    if picture.bits == 16 and options.fp32_for_16bit and runtime.precision != "fp32":
        runtime = dataclasses.replace(runtime, precision="fp32")
    tile, pad = options.tile, options.tile_pad
    color = upscale_pixels(generator, picture.color, runtime, tile, pad, progress)
    alpha = picture.alpha
    if alpha is not None:
        height, width = alpha.shape
        if options.alpha == "network":
            alpha = upscale_pixels(generator, alpha, runtime, tile, pad, progress and f"{progress} (alpha)")
        else:
            alpha = resize(alpha, (width * generator.scale, height * generator.scale), Image.Resampling.BICUBIC)
    if options.outscale is not None and options.outscale != generator.scale:
        height, width = picture.color.shape[:2]
        size = (max(1, round(width * options.outscale)), max(1, round(height * options.outscale)))
        color = resize(color, size, Image.Resampling.LANCZOS)
        alpha = None if alpha is None else resize(alpha, size, Image.Resampling.LANCZOS)
    return Picture(color, alpha, picture.icc_profile)


def upscale_pixels(
    generator: SRGenerator,
    pixels: np.ndarray,
    runtime: Runtime,
    tile: int | None = None,
    pad: int | None = None,
    progress: str | None = None,
) -> np.ndarray:
    """HxWx3 (or HxW grayscale, run as RGB) uint8 or uint16 -> the same kind,
    `scale` times larger. `tile` None: planned from the network's measured memory and the memory at hand; `pad` None:
    measured on the network when the image runs in tiles (tile_pad)."""
    height, width = pixels.shape[:2]
    values = pixels.astype(np.float32)
    values /= np.iinfo(pixels.dtype).max
    if pixels.ndim == 2:
        image = torch.from_numpy(values).expand(3, height, width)
    else:
        image = torch.from_numpy(values).permute(2, 0, 1)
    if pad is None and needs_tiles(generator, runtime, height, width, tile):
        chosen = tile_pad(generator, runtime)
        if chosen.how == "measured":
            log.info("%s", chosen.describe())
        pad = chosen.pad
    tile = auto_tile(generator, runtime, height, width, pad or 0) if tile is None else tile
    scale = generator.scale
    out = np.empty((height * scale, width * scale) + pixels.shape[2:], dtype=pixels.dtype)
    upscale_tiled(generator, image, runtime, out, tile, pad, progress)
    return out


def upscale_rgb8(generator: SRGenerator, image: np.ndarray, runtime: Runtime) -> np.ndarray:
    """HxWx3 uint8 -> (sH)x(sW)x3 uint8; in tiles when the memory budget needs
    them, reading the pad measured for the network (inference/tile_pad.py)."""
    return upscale_pixels(inference_network(generator, runtime), np.asarray(image, dtype=np.uint8), runtime)


def inference_network(generator: SRGenerator, runtime: Runtime) -> SRGenerator:
    """The generator's eval-mode function, rearranged to run faster (see
    inference/fused.py), on the runtime's device and memory format."""
    return runtime.place(fuse_for_inference(generator))


def collect_inputs(inputs: list[Path]) -> list[Path]:
    """Files as given; folders expanded to the images and videos below them.
    Raises SrganError for a path that does not exist and a folder with neither."""
    files: list[Path] = []
    for item in inputs:
        if item.is_dir():
            found = sorted(find_images(item) + find_videos(item))
            if not found:
                raise SrganError(
                    f"{item}: a folder with no images or videos ({', '.join(IMAGE_EXTENSIONS + VIDEO_EXTENSIONS)})"
                )
            files.extend(found)
        elif item.is_file():
            note_read(item, "a video" if is_video(item) else "an image")
            files.append(item)
        else:
            raise not_found(item, "file or folder")
    return files


def count_label(files: list[Path]) -> str:
    """'3 images', '1 image and 2 videos'."""
    videos = sum(is_video(source) for source in files)
    images = len(files) - videos
    image_part = f"{images} image{'' if images == 1 else 's'}"
    video_part = f"{videos} video{'' if videos == 1 else 's'}"
    if not videos:
        return image_part
    return f"{image_part} and {video_part}" if images else video_part


def scale_label(scale: int, outscale: float | None) -> str:
    """4 -> '4', 2.5 -> '2.5': the final scale as it appears in file names."""
    return f"{scale if outscale is None else outscale:g}"


# Extensions that name a file srgan cannot write: `-o result.gif` is a
# mistake to report, not a folder to create.
FOREIGN_EXTENSIONS = (
    *IMAGE_EXTENSIONS,
    *VIDEO_EXTENSIONS,
    ".gif",
    ".tga",
    ".ppm",
    ".pgm",
    ".pbm",
    ".ico",
    ".heic",
    ".avif",
    ".jxl",
    ".exr",
    ".hdr",
    ".dng",
    ".raw",
    ".pdf",
    ".svg",
)


def plan_outputs(
    files: list[Path], output: Path | None, scale: int, options: UpscaleOptions
) -> list[tuple[Path, Path]]:
    """(input, output) pairs, checked as a whole before any work: each
    output lies in the folder asked for (beside its input, or -o), is no
    input, is claimed once, and exists only with --force. Raises SrganError
    for a plan that breaks any of these, and for an -o or --suffix srgan
    cannot write to."""
    writable = (*OUTPUT_FORMATS, *VIDEO_CONTAINERS)
    # -o names the one file to write, or None
    named = output if output is not None and output.suffix.lower() in writable and not output.is_dir() else None
    if output is not None and named is None and not output.is_dir() and output.suffix.lower() in FOREIGN_EXTENSIONS:
        raise SrganError(
            f"-o {output}: cannot write {output.suffix} files; expected a folder, or a file name "
            f"ending in {', '.join(sorted(OUTPUT_FORMATS))} (images) or "
            f"{', '.join(sorted(VIDEO_CONTAINERS))} (videos)"
        )
    if output is not None and output.exists() and not output.is_dir() and named is None:
        raise SrganError(f"-o {output}: a file that is not an image srgan writes; expected a folder")
    if named is not None and len(files) > 1:
        raise SrganError(f"-o {output}: names one file, but there are {len(files)} inputs (give a folder)")
    if named is not None and files and is_video(files[0]) != (named.suffix.lower() in VIDEO_CONTAINERS):
        kind, expected = ("a video", VIDEO_CONTAINERS) if is_video(files[0]) else ("an image", OUTPUT_FORMATS)
        raise SrganError(
            f"-o {output}: {files[0]} is {kind}; expected a file name ending in {', '.join(sorted(expected))}"
        )
    suffix = f"_x{scale_label(scale, options.outscale)}" if options.suffix is None else options.suffix
    if any(c in suffix for c in ("/", "\\", "\x00")):
        raise SrganError(f"--suffix {suffix!r}: expected a suffix for a file name, without '/'")
    plan = []
    for source in files:
        if named is not None:
            target = named
        elif is_video(source):
            target = (source.parent if output is None else output) / f"{source.stem}{suffix}.mp4"
        else:
            # JPEG has no alpha: images that have one go to PNG instead.
            ext = "png" if options.ext == "jpg" and has_alpha(source) else options.ext
            target = (source.parent if output is None else output) / f"{source.stem}{suffix}.{ext}"
        plan.append((source, target))
    inputs = {_identity(source) for source in files}
    claimed: dict[Path, Path] = {}
    for source, target in plan:
        folder = (source.parent if output is None else output) if named is None else named.parent
        for written in video_outputs(target, options.compare) if is_video(source) else [target]:
            if written.exists() and _identity(written) in inputs:
                raise SrganError(
                    f"{written}: would overwrite an input {'video' if is_video(written) else 'image'}; "
                    "choose another -o or --suffix"
                )
            resolved = check_output(written, options.force, (), folder)
            if resolved in claimed:
                raise SrganError(
                    f"{written}: both {claimed[resolved]} and {source} would be written there; "
                    "upscale them into separate folders"
                )
            claimed[resolved] = source
    return plan


def _identity(path: Path) -> tuple[int, int]:
    """(device, inode): the same file under any name or link."""
    info = path.stat()
    return info.st_dev, info.st_ino
