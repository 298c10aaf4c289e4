"""models/large_kernel.py: a large kernel's weight gradient computed as a
forward convolution equals torch's own, and the module is torch's Conv2d in
every other respect (parameters, state dict, random stream, layouts)."""

import pytest
import torch
from torch import nn

from srgan.models import build_generator
from srgan.models.large_kernel import LargeKernelConv2d, swap_large_kernels

pytest.importorskip("spandrel")
from test_spandrel_archs import tiny_model  # noqa: E402


def twins(kernel, padding, dtype=torch.float32, **options):
    torch.manual_seed(0)
    plain = nn.Conv2d(3, 4, kernel, padding=padding, dtype=dtype, **options)
    holder = nn.Sequential(nn.Conv2d(3, 4, kernel, padding=padding, dtype=dtype, **options))
    holder[0].load_state_dict(plain.state_dict())
    assert swap_large_kernels(holder) == 1
    return plain, holder[0]


def forward_and_grads(conv, x, grad, bf16=False):
    conv.zero_grad()
    x = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        y = conv(x)
    y.backward(grad.to(y.dtype))
    return y, x.grad, conv.weight.grad, conv.bias.grad


@pytest.mark.parametrize(
    "kernel, padding",
    [(15, 7), (17, 8), ((15, 17), (7, 8)), (15, 0), (17, 3)],  # same, valid and other pads
)
@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_the_gradients_equal_torchs_own(kernel, padding, dtype, tolerance):
    plain, swapped = twins(kernel, padding, dtype)
    assert isinstance(swapped, LargeKernelConv2d)
    x = torch.randn(2, 3, 20, 23, dtype=dtype)
    out = plain(x)
    grad = torch.randn_like(out)
    for a, b in zip(forward_and_grads(plain, x, grad), forward_and_grads(swapped, x, grad), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert (a - b).abs().max() <= tolerance * a.abs().max()
    assert swapped(x).grad_fn.name() == "WeightGradAsConvolutionBackward"


def test_under_bf16_autocast_it_computes_what_autocast_does():
    plain, swapped = twins(15, 7)
    x = torch.randn(2, 3, 24, 24)
    grad = torch.randn(2, 4, 24, 24)
    mine, theirs = forward_and_grads(swapped, x, grad, bf16=True), forward_and_grads(plain, x, grad, bf16=True)
    assert mine[0].dtype == torch.bfloat16 and torch.equal(mine[0], theirs[0])  # the same bf16 convolution
    for a, b in zip(mine[1:], theirs[1:], strict=True):
        assert a.dtype == torch.float32  # back through the cast to the fp32 input and parameters
        assert (a - b).abs().max() <= 1e-2 * a.abs().max()  # bf16's 8 bits, summed in another order


def test_channels_last_weights_get_channels_last_gradients():
    plain, swapped = twins(15, 7)
    plain, swapped = plain.to(memory_format=torch.channels_last), swapped.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 24, 24).contiguous(memory_format=torch.channels_last)
    grad = torch.randn(2, 4, 24, 24).contiguous(memory_format=torch.channels_last)
    mine, theirs = forward_and_grads(swapped, x, grad), forward_and_grads(plain, x, grad)
    assert swapped.weight.grad.is_contiguous(memory_format=torch.channels_last)
    assert (mine[2] - theirs[2]).abs().max() <= 1e-5 * theirs[2].abs().max()


def test_without_a_weight_gradient_it_is_torchs_convolution():
    _, swapped = twins(15, 7)
    x = torch.randn(1, 3, 16, 16, requires_grad=True)
    assert swapped(x).grad_fn.name() == "WeightGradAsConvolutionBackward"
    swapped.requires_grad_(False)  # a frozen layer: only the input's gradient, torch's own
    assert swapped(x).grad_fn.name() == "ConvolutionBackward0"
    with torch.no_grad():
        assert swapped(x).grad_fn is None


def test_only_plain_convolutions_past_the_cliff_are_swapped_with_their_own_parameters():
    torch.manual_seed(0)
    network = nn.Sequential(
        nn.Conv2d(4, 4, 13, padding=6),  # below the cliff: oneDNN's is as fast
        nn.Conv2d(4, 4, 15, padding=7),
        nn.Conv2d(4, 4, 15, padding=7, groups=2),
        nn.Conv2d(4, 4, 15, padding=7, stride=2),
        nn.Conv2d(4, 4, 15, padding=7, dilation=2),
        nn.Conv2d(4, 4, 15, padding="same"),
        nn.Sequential(nn.Conv2d(4, 4, (1, 17), padding=(0, 8), bias=False)),
        nn.Conv2d(4, 4, (17, 1), padding=(8, 0)),  # the cliff is in the width: 17 tall is fast
    ).eval()
    before = {k: v.data_ptr() for k, v in network.state_dict().items()}
    rng = torch.get_rng_state()
    assert swap_large_kernels(network) == 2
    assert torch.equal(torch.get_rng_state(), rng)  # no weights drawn: a run's random stream is unchanged
    swapped = [type(m) is LargeKernelConv2d for m in (*network[:6], network[6][0], network[7])]
    assert swapped == [False, True] + [False] * 4 + [True, False]
    assert {k: v.data_ptr() for k, v in network.state_dict().items()} == before
    assert network[6][0].bias is None and not network[1].training


def test_srgans_realplksr_swaps_its_partial_large_kernel_and_spandrels_keys_stay():
    generator = build_generator(tiny_model("realplksr"))
    swapped = [name for name, m in generator.named_modules() if isinstance(m, LargeKernelConv2d)]
    assert swapped == ["network.feats.1.lk.conv"]
    from spandrel.architectures.PLKSR import RealPLKSR

    torch.manual_seed(0)
    theirs = RealPLKSR(dim=8, n_blocks=1, kernel_size=15, upscaling_factor=4)
    assert generator.network.state_dict().keys() == theirs.state_dict().keys()


def test_plksrs_rectangular_kernels_are_swapped_by_their_width():
    from srgan.configs import load_config

    options = "model.options={dim: 8, n_blocks: 1, lk_type: RectSparsePLK, kernel_size: 15}"
    generator = build_generator(load_config("demo", ["model.arch=plksr", options, "data.crop_size=32"]).model)
    kernels = {m.kernel_size: type(m) for m in generator.modules() if isinstance(m, nn.Conv2d)}
    assert kernels[(5, 15)] is LargeKernelConv2d  # 15 wide: off oneDNN's cliff
    assert kernels[(15, 5)] is nn.Conv2d and kernels[(5, 5)] is nn.Conv2d  # 5 wide: oneDNN's own is as fast
