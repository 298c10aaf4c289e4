"""The generator for inference: eval-mode BatchNorm is an affine map per
channel, folded into the convolution before it. The same function, 33
fewer operations for 16 blocks."""

from __future__ import annotations

import copy

from torch import nn
from torch.nn.utils import fuse_conv_bn_eval

from srgan.models import Generator, SRGenerator


def fuse_for_inference(generator: SRGenerator) -> SRGenerator:
    """An eval-mode copy computing what `generator` computes in eval mode."""
    g = copy.deepcopy(generator).eval()
    if isinstance(g, Generator) and g.norm == "batch":  # SRResNet's BatchNorm; rrdb and compact have none
        for block in g.body:
            block.conv1, block.bn1 = _fused(block.conv1, block.bn1), nn.Identity()
            block.conv2, block.bn2 = _fused(block.conv2, block.bn2), nn.Identity()
        conv, bn = g.body_end  # nn.Sequential of the two, when norm is batch
        g.body_end = nn.Sequential(_fused(conv, bn))
    return g.requires_grad_(False)


def _fused(conv: object, bn: object) -> nn.Conv2d:
    assert isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)  # norm "batch": each conv has its BN
    return fuse_conv_bn_eval(conv, bn)
