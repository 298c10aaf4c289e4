"""`srgan bench upscale`: the project's upscaling path against a plain fp32
NCHW forward of the same generator, timed in one run."""
