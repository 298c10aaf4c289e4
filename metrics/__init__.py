"""Image quality metrics: PSNR/SSIM on Y with the border shaved, LPIPS and
DISTS, the CIEDE2000 colour drift, scored by name."""

from srgan.metrics.colour import ciede2000, colour_drift, rgb_to_lab
from srgan.metrics.psnr_ssim import CONVENTION, psnr_y, quantize, ssim_y
from srgan.metrics.scores import (
    LOWER_IS_BETTER,
    ImageScores,
    better,
    metric_columns,
    parse_metric_names,
    worst_score,
)

__all__ = [
    "CONVENTION",
    "LOWER_IS_BETTER",
    "ImageScores",
    "better",
    "ciede2000",
    "colour_drift",
    "metric_columns",
    "parse_metric_names",
    "psnr_y",
    "quantize",
    "rgb_to_lab",
    "ssim_y",
    "worst_score",
]
