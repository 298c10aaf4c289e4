import pytest
import torch

from srgan.models import Discriminator, Generator


def srresnet_parameters(scale: int, blocks: int, c: int) -> int:
    head = 3 * c * 81 + c + 1
    block = 2 * (c * c * 9 + c) + 2 * 2 * c + 1
    body_end = c * c * 9 + c + 2 * c
    upsample = (c * 4 * c * 9 + 4 * c + 1) * {2: 1, 4: 2, 8: 3}[scale]
    tail = c * 3 * 81 + 3
    return head + blocks * block + body_end + upsample + tail


@pytest.mark.parametrize("scale", [2, 4, 8])
def test_generator_output_shape_and_range(scale):
    g = Generator(scale, blocks=2, channels=16)
    y = g(torch.rand(2, 3, 12, 10) * 4 - 2)  # inputs outside [0, 1] too
    assert y.shape == (2, 3, 12 * scale, 10 * scale)
    assert y.min() >= 0 and y.max() <= 1


def test_parameter_counts_match_the_architecture_and_leftthomas():
    assert sum(p.numel() for p in Generator(4, 16, 64).parameters()) == srresnet_parameters(4, 16, 64)
    # leftthomas/SRGAN prints these for its 5-block generator and its discriminator.
    assert sum(p.numel() for p in Generator(4, 5, 64).parameters()) == 734_219
    assert sum(p.numel() for p in Discriminator().parameters()) == 5_215_425


def test_discriminator_gives_one_logit_per_image_for_any_crop():
    d = Discriminator(8)
    assert d(torch.rand(3, 3, 40, 40)).shape == (3,)
    assert d(torch.rand(2, 3, 96, 64)).shape == (2,)
    first_bn = [m for m in d.features if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(first_bn) == 7  # BN on all convs but the first


def reference_forward(g: Generator, x: torch.Tensor) -> torch.Tensor:
    """SRResNet as the paper draws it, layer after layer."""
    h = g.head(x)
    skip = h
    for block in g.body:
        h = h + block.bn2(block.conv2(block.prelu(block.bn1(block.conv1(h)))))
    h = skip + g.body_end(h)
    for stage in g.upsample:
        h = stage.prelu(torch.nn.functional.pixel_shuffle(stage.conv(h), 2))
    return (torch.tanh(g.tail(h)) + 1) / 2


@pytest.mark.parametrize("scale", [2, 4, 8])
def test_the_rearranged_tail_computes_the_plain_srresnet(scale):
    torch.manual_seed(scale)
    g = Generator(scale, 2, 8).double()
    x = torch.rand(2, 3, 11, 9, dtype=torch.float64)
    assert torch.allclose(g(x), reference_forward(g, x), atol=1e-12)
    # the gradients reach tail.weight as they would through the plain tail
    (ours,) = torch.autograd.grad(g(x).sum(), g.tail.weight)
    (plain,) = torch.autograd.grad(reference_forward(g, x).sum(), g.tail.weight)
    assert torch.allclose(ours, plain, atol=1e-10)


@pytest.mark.parametrize("scale, blocks", [(4, 1), (2, 2), (8, 1)])
def test_receptive_radius_is_exact(scale, blocks):
    """An input pixel `radius` LR pixels away from an output's LR pixel can
    change it; one further away cannot."""
    torch.manual_seed(0)
    g = Generator(scale, blocks, 4).eval()
    r = g.receptive_radius
    size = 2 * r + 8
    x = torch.rand(1, 3, size, size, dtype=torch.float64)
    g = g.double()
    centre = size // 2
    with torch.no_grad():
        base = g(x)
        for distance, changes in ((r, True), (r + 1, False)):
            y = x.clone()
            y[:, :, centre, centre + distance] += 1.0
            diff = (g(y) - base).abs()[0, :, :, centre * scale : (centre + 1) * scale]
            assert bool(diff.max() > 0) == changes, (distance, r)
