"""Benchmarks of the real training step and the real upscaling path
(`srgan bench train|upscale`): figures for docs/performance.md, never timed tests."""
