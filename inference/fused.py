"""The generator rearranged for inference: the same function, fewer and
faster operations (measured in docs/performance.md).

- BatchNorm in eval mode is an affine map per channel: folded into the
  convolution before it.
- The 9x9 tail convolution at full resolution, with 3 output channels, is
  the slowest layer on a CPU (oneDNN runs so few output channels poorly) and
  needs the 64-channel full-resolution tensor the last PixelShuffle makes.
  PixelShuffle only moves values and the PReLU after it has one shared
  slope, so the tail can run before the shuffle instead: as a 5x5
  convolution from the 4 x 64 phase channels to 4 x 3, followed by a
  PixelShuffle of 12 channels. Its weights are the 9x9 kernel's, rearranged;
  zero padding of 4 at full resolution is zero padding of 2 on the coarser grid.
"""
from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.utils import fuse_conv_bn_eval

from srgan.models import Generator


def fuse_for_inference(generator: Generator) -> Generator:
    """An eval-mode copy computing what `generator` computes in eval mode."""
    g = copy.deepcopy(generator).eval()
    for block in g.body:
        block.conv1, block.bn1 = fuse_conv_bn_eval(block.conv1, block.bn1), nn.Identity()
        block.conv2, block.bn2 = fuse_conv_bn_eval(block.conv2, block.bn2), nn.Identity()
    g.body_end = nn.Sequential(fuse_conv_bn_eval(g.body_end[0], g.body_end[1]))
    last = g.upsample[-1]
    last.shuffle = nn.Identity()  # prelu(shuffle(x)) == shuffle(prelu(x)) for a single slope
    g.tail = nn.Sequential(tail_before_shuffle(g.tail), nn.PixelShuffle(2))
    return g.requires_grad_(False)


def tail_before_shuffle(tail: nn.Conv2d) -> nn.Conv2d:
    """The k x k convolution (k odd, stride 1, padding k // 2) applied after a
    PixelShuffle(2), as a convolution applied before it: input channel
    4c + 2py + px holds channel c at phase (py, px); output channel
    4o + 2qy + qx the output o at phase (qy, qx)."""
    c_out, c_in, k, _ = tail.weight.shape
    half = k // 2
    # Coarse-grid steps to reach: by = (dy + qy - py) / 2 with |dy| <= half and
    # qy - py in [-1, 1], so |by| <= (half + 1) // 2: 2 for the 9x9 tail, a 5x5 kernel.
    reach = (half + 1) // 2
    size = 2 * reach + 1
    weight = tail.weight.new_zeros(4 * c_out, 4 * c_in, size, size)
    for qy in range(2):
        for qx in range(2):
            for py in range(2):
                for px in range(2):
                    for by in range(-reach, reach + 1):
                        for bx in range(-reach, reach + 1):
                            # full-resolution offsets from an output at phase q to an input at phase p
                            dy, dx = 2 * by + py - qy, 2 * bx + px - qx
                            if abs(dy) <= half and abs(dx) <= half:
                                weight[qy * 2 + qx :: 4, py * 2 + px :: 4, by + reach, bx + reach] = (
                                    tail.weight[:, :, dy + half, dx + half]
                                )
    conv = nn.Conv2d(4 * c_in, 4 * c_out, size, padding=reach, device=tail.weight.device, dtype=tail.weight.dtype)
    with torch.no_grad():
        conv.weight.copy_(weight)
        conv.bias.copy_(tail.bias.repeat_interleave(4))
    return conv
