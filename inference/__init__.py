"""Inference: upscaling image files with a trained generator."""

from srgan.inference.upscale import upscale_files, upscale_rgb8

__all__ = ["upscale_files", "upscale_rgb8"]
