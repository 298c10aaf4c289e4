"""The generator for inference, each layer in its eval form computed once:
eval-mode BatchNorm is an affine map per channel, folded into the
convolution before it (the same function, 33 fewer operations for 16
blocks); SPAN's Conv3XC blocks (through spandrel) become the one 3x3
convolution their eval mode computes."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import fuse_conv_bn_eval

from srgan.models import Generator, SRGenerator
from srgan.models.spandrel_generator import SpandrelGenerator


def fuse_for_inference(generator: SRGenerator) -> SRGenerator:
    """Return an eval-mode copy, without gradients, that computes what
    `generator` computes in eval mode; `generator` itself is left unchanged."""
    g = copy.deepcopy(generator).eval()
    if isinstance(g, Generator) and g.norm == "batch":  # SRResNet's BatchNorm; rrdb and compact have none
        for block in g.body:
            block.conv1, block.bn1 = _fused(block.conv1, block.bn1), nn.Identity()
            block.conv2, block.bn2 = _fused(block.conv2, block.bn2), nn.Identity()
        conv, bn = g.body_end  # nn.Sequential of the two, when norm is batch
        g.body_end = nn.Sequential(_fused(conv, bn))
    if isinstance(g, SpandrelGenerator):
        _fold_span_blocks(g.network)
    return g.requires_grad_(False)


def _fused(conv: object, bn: object) -> nn.Conv2d:
    assert isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)  # norm "batch": each conv has its BN
    return fuse_conv_bn_eval(conv, bn)


class FoldedConv3XC(nn.Module):
    """What a SPAN Conv3XC computes in eval mode: its eval convolution (a 1x1,
    3x3, 1x1 chain plus the 1x1 skip, merged), then its optional leaky ReLU.
    Conv3XC itself re-merges the chain into the parameters' .data in every
    eval forward: wasted work per tile, and a mutation torch's ONNX exporter
    cannot trace."""

    def __init__(self, block: Any):  # spandrel's Conv3XC
        super().__init__()
        with torch.no_grad():
            block.update_params()  # spandrel's own merge, once
        self.conv = block.eval_conv
        self.has_relu = block.has_relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return F.leaky_relu(out, negative_slope=0.05) if self.has_relu else out


def _conv3xc() -> type | None:
    try:
        from spandrel.architectures.SPAN.__arch.span import Conv3XC
    except ImportError:  # a spandrel without SPAN, or another layout of its modules
        return None
    return Conv3XC


def merge_span_blocks(network: nn.Module) -> None:
    """Recompute, in place, the eval convolution of each SPAN Conv3XC in
    `network` from its branches. Training runs the branches only, so a
    trained network's eval_conv holds the merge of some earlier weights
    until an eval forward redoes it; a file written then would carry it to
    tools that run eval_conv as stored."""
    conv3xc = _conv3xc()
    if conv3xc is None:
        return
    with torch.no_grad():
        for module in network.modules():
            if isinstance(module, conv3xc):
                module.update_params()  # type: ignore[operator]  # nn.Module reads it as a tensor attribute


def _fold_span_blocks(network: nn.Module) -> None:
    conv3xc = _conv3xc()
    if conv3xc is None:  # nothing to fold
        return
    for name, child in network.named_children():
        if isinstance(child, conv3xc):
            setattr(network, name, FoldedConv3XC(child))
        else:
            _fold_span_blocks(child)
