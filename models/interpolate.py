"""Network interpolation: a generator whose every weight lies between two
trained generators of the same architecture and shape, C = (1 - alpha) * A
+ alpha * B (Wang et al. 2018, ESRGAN, section 3.4; Real-ESRGAN's "denoise
strength" blends its x4v3 model with its wdn model the same way). alpha 0
is A, alpha 1 is B; in between, the strength of B's look is a dial instead
of a retraining. Typically A is the PSNR-oriented generator (a run's
checkpoints/pretrained.pt) and B the GAN one (the run itself).

alpha is kept to [0, 1]: beyond the ends the weights extrapolate, which
amplifies exactly the artefacts a blend is meant to soften, and nothing
guarantees the network still computes a picture there.

Both files are read as `srgan upscale -k` reads a generator
(models/checkpoint.py load_described_generator: srgan checkpoints and run
folders, .safetensors, the community's .pth), so anything srgan runs can be
blended with a generator of the same shape."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

from srgan.files.errors import SrganError
from srgan.models.build import SRGenerator
from srgan.models.checkpoint import load_described_generator

# What shapes a generator beyond its tensors' shapes (srgan's own architectures):
# two networks that differ in one of these compute different functions of the same weights.
SETTINGS = ("arch", "scale", "norm", "residual", "growth")


def check_alpha(alpha: float, option: str = "--alpha") -> float:
    """`alpha` when it is a number in [0, 1]; SrganError naming `option` otherwise."""
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and 0.0 <= alpha <= 1.0):
        raise SrganError(
            f"{option}: expected a number from 0 (the first generator) to 1 (the second), got {alpha!r} "
            "(srgan does not extrapolate beyond either end)"
        )
    return float(alpha)


def blend_state_dicts(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """A new state dict: each floating tensor (1 - alpha) * a + alpha * b,
    computed in a's dtype (alpha 0 gives a's tensors exactly, alpha 1 b's);
    integer and bool tensors (BatchNorm's num_batches_tracked, an attention
    layer's index) copied from a, since they count or index and do not
    interpolate. For state dicts check_same_keys has passed and an alpha
    check_alpha has (blend_generators checks both)."""
    blended = {}
    for name, tensor in a.items():
        other = b[name].to(device=tensor.device, dtype=tensor.dtype)
        if not tensor.is_floating_point() or alpha == 0.0:
            blended[name] = tensor.clone()
        elif alpha == 1.0:  # exactly B's numbers: the formula would turn a -0.0 into +0.0
            blended[name] = other.clone()
        else:
            blended[name] = (1.0 - alpha) * tensor + alpha * other
    return blended


def check_same_keys(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], origin_b: str, origin_a: str) -> None:
    """Raise SrganError naming the first key (in a's order, then b's) that the
    two state dicts do not share with the same shape and dtype kind."""
    where = f"{origin_b}: does not match {origin_a}"
    for name, tensor in a.items():
        if name not in b:
            raise SrganError(f"{where}: lacks {name} (another architecture?)")
        other = b[name]
        if other.shape != tensor.shape:
            raise SrganError(f"{where}: {name} has shape {list(other.shape)} there, {list(tensor.shape)} here")
        if other.is_floating_point() != tensor.is_floating_point():
            raise SrganError(f"{where}: {name} is {other.dtype} there, {tensor.dtype} here")
    for name in b:
        if name not in a:
            raise SrganError(f"{where}: has {name} in excess (another architecture?)")


def check_same_settings(a: nn.Module, b: nn.Module, origin_b: str, origin_a: str) -> None:
    """Raise SrganError when the two generators share their tensors' shapes
    but not a setting that changes what those weights compute (SETTINGS,
    or another class)."""
    if type(a) is not type(b):
        raise SrganError(f"{origin_b}: does not match {origin_a}: a {type(b).__name__}, not a {type(a).__name__}")
    for key in SETTINGS:
        mine, theirs = getattr(a, key, None), getattr(b, key, None)
        if mine != theirs:
            raise SrganError(f"{origin_b}: does not match {origin_a}: model.{key} is {theirs!r} there, {mine!r} here")
    scales = [[getattr(m, "res_scale", None) for m in g.modules() if hasattr(m, "res_scale")] for g in (a, b)]
    if scales[0] != scales[1]:
        raise SrganError(f"{origin_b}: does not match {origin_a}: model.res_scale differs")


def blend_generators(
    a: SRGenerator, b: nn.Module, alpha: float, origin_b: str = "B", origin_a: str = "A"
) -> SRGenerator:
    """`a` with its weights replaced by the blend of a's and b's
    (blend_state_dicts), in place, and returned. Raises SrganError for an
    alpha outside [0, 1], naming the first key that b lacks, has in excess
    or holds in another shape or dtype kind, and for generators of other
    settings."""
    alpha = check_alpha(alpha)
    mine, theirs = a.state_dict(), b.state_dict()
    check_same_keys(mine, theirs, origin_b, origin_a)  # the first differing key, before any setting
    check_same_settings(a, b, origin_b, origin_a)
    a.load_state_dict(blend_state_dicts(mine, theirs, alpha))
    return a


def load_blended_generator(path_a: str | Path, path_b: str | Path, alpha: float) -> tuple[SRGenerator, str]:
    """The generator of `path_a` blended with that of `path_b` at `alpha`
    (0: A, 1: B), each file read as load_described_generator reads it, and a
    one-line description of the blend. Raises SrganError for a file srgan
    cannot read, an alpha outside [0, 1], and generators that differ in
    architecture or shape (naming the first key that differs)."""
    alpha = check_alpha(alpha)
    a, described_a = load_described_generator(path_a)
    b, described_b = load_described_generator(path_b)
    blend_generators(a, b, alpha, str(path_b), str(path_a))
    return a, f"{described_a}, blended with {described_b} at alpha {alpha:g} (0: the first, 1: the second)"
