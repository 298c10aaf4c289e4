"""Images in, (lr, hr) tensors out."""
from srgan.data.datasets import (
    EpochSampler,
    TrainPairs,
    ValImages,
    bicubic_downscale,
    centre_crop,
    resolve_images,
    to_tensor,
)
from srgan.data.images import find_images, load_rgb8
from srgan.data.samples import BUILTIN_SAMPLES, SAMPLE_FILES, sample_paths

__all__ = [
    "BUILTIN_SAMPLES",
    "EpochSampler",
    "SAMPLE_FILES",
    "TrainPairs",
    "ValImages",
    "bicubic_downscale",
    "centre_crop",
    "find_images",
    "load_rgb8",
    "resolve_images",
    "sample_paths",
    "to_tensor",
]
