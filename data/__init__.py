"""Images in, (lr, hr) tensors out."""

from srgan.data.datasets import (
    EpochSampler,
    FolderImages,
    TrainPairs,
    ValImages,
    bicubic_downscale,
    centre_crop,
    open_images,
    resolve_images,
    to_tensor,
)
from srgan.data.images import find_images, load_rgb8
from srgan.data.prepared import PreparedImages, is_prepared, prepare_dataset
from srgan.data.samples import BUILTIN_SAMPLES, SAMPLE_FILES, sample_paths

__all__ = [
    "BUILTIN_SAMPLES",
    "EpochSampler",
    "FolderImages",
    "PreparedImages",
    "SAMPLE_FILES",
    "TrainPairs",
    "ValImages",
    "bicubic_downscale",
    "centre_crop",
    "is_prepared",
    "open_images",
    "prepare_dataset",
    "find_images",
    "load_rgb8",
    "resolve_images",
    "sample_paths",
    "to_tensor",
]
