"""Matching LR image files to their HR partners: an LR image belongs to the HR
image with the same relative path less its extension (a.png <-> a.jpg,
sub/b.png <-> sub/b.webp), and srgan uses a pair when the HR is LR x scale or
larger by fewer than `scale` pixels a side. Both the paired datasets
(srgan.data.paired) and `srgan prepare --lr` (srgan.data.prepared) match
files here."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from srgan.data.images import find_images
from srgan.files.errors import SrganError
from srgan.files.reading import kind_of

log = logging.getLogger("srgan")

SHOWN_UNMATCHED = 5  # names listed in the warning about images without a partner


def stem_key(path: Path, root: Path) -> str:
    """The relative path less its extension: what matches an LR to its HR."""
    return path.relative_to(root).with_suffix("").as_posix()


def folder_pairs(
    hr_paths: list[Path], hr_root: Path, lr_root: Path, hr_key: str, lr_key: str
) -> list[tuple[Path, Path]]:
    """(HR, LR) file pairs, in the HR images' order. It warns once of the
    images without a partner on each side (their count and first names), and
    skips with a warning a stem that names two files of one side (a.png and
    a.jpg). Raises SrganError when the LR folder is missing or holds the HR
    images, and when no HR image has a partner."""
    if not lr_root.is_dir():
        kind = kind_of(lr_root)
        there = "no such folder" if kind is None else f"not a folder ({kind})"
        raise SrganError(f"{lr_key}: {lr_root}: {there} (expected a folder of LR images)")
    if hr_root.resolve().is_relative_to(lr_root.resolve()):  # every HR image would be taken for an LR one
        same = "the same folder as" if hr_root.resolve() == lr_root.resolve() else "a folder holding"
        raise SrganError(
            f"{lr_key}: {lr_root} is {same} the HR images ({hr_key} {hr_root}); expected a folder of LR images "
            "of its own"
        )
    inside = lr_root.resolve()  # an LR folder kept inside the HR folder: its images are not HR images
    hr_paths = [path for path in hr_paths if not path.resolve().is_relative_to(inside)]
    sides = {}
    for side, paths, root in (("HR", hr_paths, hr_root), ("LR", find_images(lr_root), lr_root)):
        by_stem: dict[str, list[Path]] = {}
        for path in paths:
            by_stem.setdefault(stem_key(path, root), []).append(path)
        for stem, found in by_stem.items():
            if len(found) > 1:
                log.warning("skipping %s: %d %s files (%s)", stem, len(found), side, ", ".join(p.name for p in found))
        sides[side] = {stem: found[0] for stem, found in by_stem.items() if len(found) == 1}
    hr, lr = sides["HR"], sides["LR"]
    for side, key, own, other in (("HR", hr_key, hr, lr), ("LR", lr_key, lr, hr)):
        alone = [stem for stem in own if stem not in other]
        if alone:
            shown = ", ".join(alone[:SHOWN_UNMATCHED]) + (", ..." if len(alone) > SHOWN_UNMATCHED else "")
            log.warning("%s: %d %s images without a partner, skipped: %s", key, len(alone), side, shown)
    pairs = [(path, lr[stem]) for stem, path in hr.items() if stem in lr]
    if not pairs:
        raise SrganError(f"{hr_key}, {lr_key}: no HR image has an LR partner (matched by relative path less extension)")
    return pairs


def sizes_agree(hr_size: tuple[int, int], lr_size: tuple[int, int], scale: int) -> bool:
    """HR (height, width) is LR x scale, or larger by fewer than `scale` px a side."""
    return all(0 <= h - lo * scale < scale for h, lo in zip(hr_size, lr_size, strict=True))


def fit_hr_to_lr(hr: np.ndarray, lr: np.ndarray, scale: int, pair: tuple[Path, Path]) -> np.ndarray | None:
    """The HR cut to exactly LR x scale; None, with a warning naming the pair, when the sizes disagree."""
    (h, w), (lh, lw) = hr.shape[:2], lr.shape[:2]
    if not sizes_agree((h, w), (lh, lw), scale):
        warn_size(pair, (w, h), (lw, lh), scale)
        return None
    return hr[: lh * scale, : lw * scale]


def warn_size(pair: tuple[Path, Path], hr_wh: tuple[int, int], lr_wh: tuple[int, int], scale: int) -> None:
    log.warning(
        "skipping the pair %s (%dx%d) / %s (%dx%d): the HR must be the LR x %d (model.scale), "
        "or larger by fewer than %d px a side",
        pair[0],
        *hr_wh,
        pair[1],
        *lr_wh,
        scale,
        scale,
    )
