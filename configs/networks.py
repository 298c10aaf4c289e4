"""The arithmetic of the networks a config describes, done before any is
built: which modules of VGG `features` a perceptual layer keeps and how many
poolings precede it (losses/perceptual.py builds that table), and how many
weights an RRDBNet has (models/rrdb.py).

It lives in configs/, not beside the networks, because the config checks
need it and configs/ sits below models/ and losses/: importing either
package runs its __init__, which imports torch (and models/ imports
configs/, a cycle)."""

from __future__ import annotations

from srgan.configs.schema import PerceptualConfig

# The layers of torchvision's VGG `features`: conv layers per block.
VGG_BLOCKS = {"vgg16": (2, 2, 3, 3, 3), "vgg19": (2, 2, 4, 4, 4)}


def vgg_layer_count(network: str, layer: str) -> int | None:
    """How many modules of VGG `features` to keep so that `layer` (conv3_4,
    relu5_4, pool5, ...) is the last; None when the name does not exist."""
    blocks = VGG_BLOCKS[network]
    index = 0
    for b, convs in enumerate(blocks, start=1):
        for i in range(1, convs + 1):
            if layer == f"conv{b}_{i}":
                return index + 1
            if layer == f"relu{b}_{i}":
                return index + 2
            index += 2
        if layer == f"pool{b}":
            return index + 1
        index += 1
    return None


def perceptual_layers(perceptual: PerceptualConfig) -> dict[str, float]:
    """The VGG layers of the perceptual loss and their weights: `layers`, or
    `layer` alone with weight 1."""
    if perceptual.layers is not None:
        return dict(perceptual.layers)
    assert perceptual.layer is not None  # the loader refuses a config with neither
    return {perceptual.layer: 1.0}


def vgg_pool_count(network: str, layer: str) -> int:
    """How many 2x2 max-poolings of VGG `features` come before `layer` (and it, for pool<b>)."""
    count = vgg_layer_count(network, layer) or 0
    kept, pools = 0, 0
    for convs in VGG_BLOCKS[network]:
        kept += 2 * convs + 1
        if kept <= count:
            pools += 1
    return pools


def generator_parameters(arch: str, scale: int, blocks: int, channels: int, growth: int) -> int:
    """The weights an RRDBNet has (counted from its layers, before building
    it); 0 for the other archs, which the key limits keep small enough."""
    if arch != "rrdb":
        return 0
    c, g = channels, growth
    dense = 9 * (c * g + (c + g) * g + (c + 2 * g) * g + (c + 3 * g) * g + (c + 4 * g) * c) + 4 * g + c
    first = 9 * 3 * (4 // scale) ** 2 * c + c
    return first + 3 * blocks * dense + 4 * (9 * c * c + c) + 9 * c * 3 + 3
