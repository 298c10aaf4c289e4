"""Image quality metrics: PSNR/SSIM on Y with the border shaved, LPIPS and DISTS, scored by name."""

from srgan.metrics.psnr_ssim import CONVENTION, psnr_y, quantize, ssim_y
from srgan.metrics.scores import LOWER_IS_BETTER, ImageScores, better, parse_metric_names, worst_score

__all__ = [
    "CONVENTION",
    "LOWER_IS_BETTER",
    "ImageScores",
    "better",
    "parse_metric_names",
    "psnr_y",
    "quantize",
    "ssim_y",
    "worst_score",
]
