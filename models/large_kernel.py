"""Large convolution kernels' weight gradient on the CPU, computed as a
forward convolution.

oneDNN's weight-gradient kernels fall off a cliff from a kernel 15 wide up,
whatever its height (torch 2.14, AVX512 EPYC: a 17x17 16-channel kernel's
weight gradient takes 7 to 9 times its forward pass, a 1x17 one 10 times a
17x1 one; at 13 wide it is as fast as the swap below), and RealPLKSR and
PLKSR put a 17x17 kernel in every block. The weight gradient is itself a convolution, of the
padded input with the output's gradient as the kernel, batch and channels
swapped:

    grad_w[o, i, u, v] = sum_{n, y, x} grad[n, o, y, x] * padded[n, i, y + u, x + v]

which oneDNN runs at its forward rate: 2.1x to 14x faster here from 15
wide, and slower below (a 17x1 kernel: 0.3x) (docs/performance.md, "Large kernels").
The module keeps nn.Conv2d's parameters and state dict, so what the run
saves is still spandrel's network to every loader; only a CPU pass that
needs the weight's gradient takes the other path."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.grad import conv2d_input

SMALLEST_SWAPPED_WIDTH = 15  # measured: at 13 wide and below (any height) oneDNN's own weight gradient is as fast


class WeightGradAsConvolution(torch.autograd.Function):
    """conv2d at stride 1, no dilation, one group, whose backward computes
    the weight's gradient as a forward convolution (the module docstring)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, padding: tuple[int, int]
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.padding = padding
        return F.conv2d(x, weight, bias, 1, padding)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        pad_h, pad_w = ctx.padding
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = conv2d_input(x.shape, weight, grad, padding=ctx.padding)
        if ctx.needs_input_grad[1]:
            padded = F.pad(x, (pad_w, pad_w, pad_h, pad_h)).transpose(0, 1).contiguous()  # (in, batch, H, W)
            kernel = grad.transpose(0, 1).contiguous()  # (out, batch, H', W')
            layout = torch.channels_last if not weight.is_contiguous() else torch.contiguous_format
            grad_weight = F.conv2d(padded, kernel).transpose(0, 1).contiguous(memory_format=layout)
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum((0, 2, 3))
        return grad_x, grad_weight, grad_bias, None


class LargeKernelConv2d(nn.Conv2d):
    """nn.Conv2d whose weight gradient on the CPU is WeightGradAsConvolution's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or not (torch.is_grad_enabled() and self.weight.requires_grad):
            return super().forward(x)
        weight, bias = self.weight, self.bias
        if torch.is_autocast_enabled("cpu"):  # as autocast runs conv2d: in its dtype
            dtype = torch.get_autocast_dtype("cpu")
            x, weight = x.to(dtype), weight.to(dtype)
            bias = bias.to(dtype) if bias is not None else None
            with torch.autocast("cpu", enabled=False):
                return WeightGradAsConvolution.apply(x, weight, bias, self.padding)
        return WeightGradAsConvolution.apply(x, weight, bias, self.padding)


def swaps_weight_grad(conv: nn.Module) -> bool:
    """Whether `conv` is a plain convolution with a kernel past oneDNN's cliff (its width)."""
    return (
        type(conv) is nn.Conv2d
        and conv.kernel_size[1] >= SMALLEST_SWAPPED_WIDTH
        and conv.stride == (1, 1)
        and conv.dilation == (1, 1)
        and conv.groups == 1
        and conv.padding_mode == "zeros"
        and not isinstance(conv.padding, str)
        and not conv._forward_hooks
        and not conv._forward_pre_hooks
    )


def swap_large_kernels(network: nn.Module) -> int:
    """Replace each of `network`'s large-kernel convolutions by a
    LargeKernelConv2d holding the same Parameter objects (no new weights
    drawn, so the random stream and the state dict are unchanged).
    Returns how many it replaced."""
    swapped = 0
    for parent in list(network.modules()):
        for name, conv in list(parent.named_children()):
            if not swaps_weight_grad(conv):
                continue
            assert isinstance(conv, nn.Conv2d)
            fast = nn.utils.skip_init(
                LargeKernelConv2d,
                conv.in_channels,
                conv.out_channels,
                conv.kernel_size,
                padding=conv.padding,
                bias=conv.bias is not None,
                device=conv.weight.device,
                dtype=conv.weight.dtype,
            )
            fast.weight = conv.weight
            fast.bias = conv.bias
            fast.train(conv.training)
            setattr(parent, name, fast)
            swapped += 1
    return swapped
