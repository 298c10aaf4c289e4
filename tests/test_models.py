import pytest
import torch

from conftest import skimage_photo
from srgan.models import Discriminator, Generator


def srresnet_parameters(scale: int, blocks: int, c: int) -> int:
    head = 3 * c * 81 + c + 1
    block = 2 * (c * c * 9 + c) + 2 * 2 * c + 1
    body_end = c * c * 9 + c + 2 * c
    if scale == 3:  # one stage to 9C channels
        upsample = c * 9 * c * 9 + 9 * c + 1
    else:
        upsample = (c * 4 * c * 9 + 4 * c + 1) * {2: 1, 4: 2, 8: 3}[scale]
    tail = c * 3 * 81 + 3
    return head + blocks * block + body_end + upsample + tail


@pytest.mark.parametrize("scale", [2, 3, 4, 8])
def test_generator_output_shape_and_range(scale):
    g = Generator(scale, blocks=2, channels=16)
    y = g(torch.rand(2, 3, 12, 10) * 4 - 2)  # inputs outside [0, 1] too
    assert y.shape == (2, 3, 12 * scale, 10 * scale)
    assert y.min() >= 0 and y.max() <= 1


def test_parameter_counts_match_the_architecture_and_leftthomas():
    assert sum(p.numel() for p in Generator(4, 16, 64).parameters()) == srresnet_parameters(4, 16, 64)
    assert sum(p.numel() for p in Generator(3, 2, 16).parameters()) == srresnet_parameters(3, 2, 16)
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
        h = stage.prelu(torch.nn.functional.pixel_shuffle(stage.conv(h), stage.factor))
    return (torch.tanh(g.tail(h)) + 1) / 2


@pytest.mark.parametrize("scale", [2, 3, 4, 8])
def test_the_rearranged_tail_computes_the_plain_srresnet(scale):
    torch.manual_seed(scale)
    g = Generator(scale, 2, 8).double()
    x = torch.rand(2, 3, 11, 9, dtype=torch.float64)
    assert torch.allclose(g(x), reference_forward(g, x), atol=1e-12)
    # the gradients reach tail.weight as they would through the plain tail
    (ours,) = torch.autograd.grad(g(x).sum(), g.tail.weight)
    (plain,) = torch.autograd.grad(reference_forward(g, x).sum(), g.tail.weight)
    assert torch.allclose(ours, plain, atol=1e-10)


@pytest.mark.parametrize("scale, blocks", [(4, 1), (2, 2), (8, 1), (3, 1)])
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


# ---- the fast-start options (docs/quality.md) ---------------------------------


def test_a_fresh_residual_generator_is_pils_bicubic():
    import numpy as np
    from PIL import Image

    from srgan.models.generator import BicubicUpsample

    hr = skimage_photo("immunohistochemistry")[:128, :160]
    lr = np.asarray(Image.fromarray(hr).resize((40, 32), Image.BICUBIC))
    pil = torch.from_numpy(np.array(Image.fromarray(lr).resize((160, 128), Image.BICUBIC))).permute(2, 0, 1)
    x = torch.from_numpy(lr.copy()).permute(2, 0, 1)[None].float() / 255
    g = Generator(4, 2, 8, residual="bicubic").eval()
    with torch.no_grad():
        out = g(x)
    assert torch.equal(out, BicubicUpsample(4)(x))  # the correction starts at zero
    ours = (out[0].clamp(0, 1) * 255).round().to(torch.uint8)
    inner = (ours.int() - pil.int())[:, 8:-8, 8:-8].abs()
    assert inner.max() <= 1  # PIL's kernel (a = -0.5), rounding apart; edges: replicated, not renormalised


@pytest.mark.parametrize("options", [{"residual": "bicubic"}, {"norm": "none", "res_scale": 0.1}, {"icnr": True}])
def test_the_options_keep_the_exact_receptive_radius_and_the_fused_network(options):
    from srgan.inference.fused import fuse_for_inference

    torch.manual_seed(1)
    g = Generator(4, 1, 4, **options).double().eval()
    with torch.no_grad():  # a trained-looking tail (the residual one starts at zero)
        g.tail.weight.normal_(0, 0.05)
    r = g.receptive_radius
    size = 2 * r + 8
    x = torch.rand(1, 3, size, size, dtype=torch.float64)
    centre = size // 2
    with torch.no_grad():
        base = g(x)
        for distance, changes in ((r, True), (r + 1, False)):
            y = x.clone()
            y[:, :, centre, centre + distance] += 1.0
            diff = (g(y) - base).abs()[0, :, :, centre * 4 : (centre + 1) * 4]
            assert bool(diff.max() > 0) == changes, (options, distance, r)
        assert torch.allclose(fuse_for_inference(g)(x), base, atol=1e-10)
    if options.get("norm") == "none":
        assert not any("bn" in name for name in g.state_dict())


def test_icnr_starts_the_sub_pixel_convolutions_as_nearest_neighbour():
    g = Generator(4, 1, 8, icnr=True)
    for stage in g.upsample:
        w = stage.conv.weight
        copies = w.view(8, 4, *w.shape[1:])  # output channel 4c + k: the same kernel for every k
        assert torch.equal(copies, copies[:, :1].expand_as(copies))


def test_the_cosine_schedule_warms_up_decays_over_pretraining_then_follows_the_milestones():
    """min_factor (0.2) and gamma (0.5) differ, so a schedule that ignored the
    milestones, or kept the cosine's floor after pretraining, gives other
    rates; both optimizers follow it, each from its own base rate."""
    from srgan.configs import load_config
    from srgan.models import resolve_runtime
    from srgan.training.loop import build_parts, set_learning_rates

    config = load_config(
        "demo",
        [
            "model.blocks=1",
            "model.channels=8",
            "model.d_channels=8",
            "loss.perceptual.weights=none",
            "train.lr_g=1e-3",
            "train.lr_d=4e-4",
            "train.pretrain_steps=100",
            "train.lr_schedule.kind=cosine",
            "train.lr_schedule.warmup_steps=10",
            "train.lr_schedule.min_factor=0.2",
            "train.lr_schedule.gamma=0.5",
            "train.lr_schedule.milestones=[100, 300]",
        ],
    )
    parts = build_parts(config, resolve_runtime("cpu", "fp32"))

    def factor_at(step):
        set_learning_rates(parts, config.train, step)
        lr_g = parts.optimizer_g.param_groups[0]["lr"]
        assert parts.optimizer_d.param_groups[0]["lr"] == pytest.approx(lr_g * 0.4)  # lr_d / lr_g
        return lr_g / 1e-3

    assert factor_at(1) == pytest.approx(0.1) and factor_at(10) == pytest.approx(1)  # the warm-up
    assert factor_at(55) == pytest.approx(0.2 + 0.8 * 0.5)  # halfway down the cosine
    assert factor_at(100) == pytest.approx(0.2)  # the end of pretraining: min_factor, no milestone yet
    assert factor_at(101) == pytest.approx(0.5)  # the GAN phase: the first milestone's gamma, no cosine
    assert factor_at(300) == pytest.approx(0.5) and factor_at(301) == pytest.approx(0.25)  # the second one


def test_a_residual_checkpoint_loads_and_upscales_by_tiles_exactly(tmp_path):
    """model.residual/norm/res_scale travel in the checkpoint's config: the
    loaded generator is the saved one, and tiles of the receptive radius
    (the bicubic reach counted) give the whole image's pixels."""
    import numpy as np
    from PIL import Image

    from conftest import run_cli
    from srgan.models.checkpoint import save_checkpoint

    torch.manual_seed(3)
    g = Generator(4, 2, 8, norm="none", residual="bicubic", res_scale=0.5)
    torch.nn.init.normal_(g.tail.weight, std=0.01)  # a trained correction, not the zero start
    model = {"scale": 4, "blocks": 2, "channels": 8, "norm": "none", "residual": "bicubic", "res_scale": 0.5}
    save_checkpoint(
        tmp_path / "g.pt",
        {
            "generator": g.state_dict(),
            "discriminator": {},
            "optimizer_g": {},
            "optimizer_d": {},
            "epoch": 0,
            "step": 0,
            "config": {"model": model},
        },
    )
    photo = tmp_path / "in.png"
    Image.fromarray(np.ascontiguousarray(skimage_photo("coffee")[:40, :56])).save(photo)
    outs = {}
    for tile in ("0", "16"):
        out = tmp_path / f"out{tile}.png"
        result = run_cli(
            "upscale",
            photo,
            "-k",
            tmp_path / "g.pt",
            "-o",
            out,
            "--tile",
            tile,
            "--tile-pad",  # the radius (auto may choose less: seams under 1/4 level, not none)
            str(g.receptive_radius),
            "--device",
            "cpu",
            "--precision",
            "fp32",
        )
        assert result.returncode == 0, result.stderr
        outs[tile] = np.asarray(Image.open(out)).astype(int)
    assert (outs["0"] == outs["16"]).all()
    with torch.no_grad():
        lr = torch.from_numpy(np.array(Image.open(photo))).permute(2, 0, 1)[None].float() / 255
        direct = (g.eval()(lr).clamp(0, 1)[0].permute(1, 2, 0) * 255).round().numpy()
    assert np.abs(outs["0"] - direct).max() <= 1


def test_x3_takes_the_fast_start_options():
    """One x3 stage: ICNR over 9 phases (a nearest-neighbour start), and the
    residual generator starts as the x3 bicubic."""
    from srgan.inference.fused import fuse_for_inference
    from srgan.models.generator import BicubicUpsample

    torch.manual_seed(2)
    g = Generator(3, 1, 8, residual="bicubic", icnr=True).eval()
    weight = g.upsample[0].conv.weight
    assert torch.equal(weight, weight[::9].repeat_interleave(9, dim=0))
    x = torch.rand(1, 3, 10, 7)
    with torch.no_grad():
        assert torch.equal(g(x), BicubicUpsample(3)(x))
        assert torch.allclose(fuse_for_inference(g)(x), g(x), atol=1e-6)


# ---- RRDBNet, written out with F.conv2d from the ESRGAN paper's figures 3-4 ----------


def planted(module: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Random weights and biases of every layer (not the near-identity
    initialisation), in float64, planted into `module`; returned by name."""
    rng = torch.Generator().manual_seed(seed)
    state = {k: torch.randn(v.shape, generator=rng, dtype=torch.float64) * 0.1 for k, v in module.state_dict().items()}
    module.double().load_state_dict(state, strict=True)
    return state


def conv3(w: dict[str, torch.Tensor], name: str, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.conv2d(x, w[f"{name}.weight"], w[f"{name}.bias"], padding=1)


def lrelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.leaky_relu(x, 0.2)


def dense_block(w: dict[str, torch.Tensor], p: str, x: torch.Tensor) -> torch.Tensor:
    """Fig. 4's residual dense block: each conv reads the input and every output before it."""
    x1 = lrelu(conv3(w, f"{p}conv1", x))
    x2 = lrelu(conv3(w, f"{p}conv2", torch.cat((x, x1), 1)))
    x3 = lrelu(conv3(w, f"{p}conv3", torch.cat((x, x1, x2), 1)))
    x4 = lrelu(conv3(w, f"{p}conv4", torch.cat((x, x1, x2, x3), 1)))
    x5 = conv3(w, f"{p}conv5", torch.cat((x, x1, x2, x3, x4), 1))
    return x + 0.2 * x5


def rrdb_block(w: dict[str, torch.Tensor], p: str, x: torch.Tensor) -> torch.Tensor:
    """Fig. 4's residual in residual dense block: three dense blocks, a skip, residual scale 0.2."""
    return x + 0.2 * dense_block(w, f"{p}rdb3.", dense_block(w, f"{p}rdb2.", dense_block(w, f"{p}rdb1.", x)))


def rrdbnet(w: dict[str, torch.Tensor], blocks: int, scale: int, x: torch.Tensor) -> torch.Tensor:
    """Fig. 3's network with Real-ESRGAN's x2/x1 entry: the input's u x u
    pixel groups as channels (channel c*u*u + i*u + j holds pixel (i, j) of
    channel c), the trunk, two nearest x2 + conv stages, conv_hr, conv_last."""
    u = 4 // scale
    if u > 1:
        n, c, h, wide = x.shape
        x = x.reshape(n, c, h // u, u, wide // u, u).permute(0, 1, 3, 5, 2, 4).reshape(n, c * u * u, h // u, wide // u)
    first = conv3(w, "conv_first", x)
    trunk = first
    for b in range(blocks):
        trunk = rrdb_block(w, f"body.{b}.", trunk)
    feat = first + conv3(w, "conv_body", trunk)
    for name in ("conv_up1", "conv_up2"):
        feat = lrelu(conv3(w, name, feat.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)))
    return conv3(w, "conv_last", lrelu(conv3(w, "conv_hr", feat)))


def test_the_dense_block_and_the_rrdb_compute_the_papers_formulas():
    from srgan.models.rrdb import RRDB, ResidualDenseBlock

    x = torch.randn(2, 6, 5, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rdb = ResidualDenseBlock(6, 3)
    w = planted(rdb, 1)
    torch.testing.assert_close(rdb(x), dense_block(w, "", x), rtol=0, atol=1e-12)
    block = RRDB(6, 3)
    w = planted(block, 2)
    torch.testing.assert_close(block(x), rrdb_block(w, "", x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("scale", [4, 2, 1])
def test_rrdbnet_computes_the_papers_network(scale):
    from srgan.models.rrdb import RRDBNet

    net = RRDBNet(scale, blocks=2, channels=6, growth=3)
    w = planted(net, scale)
    x = torch.rand(1, 3, 8, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(scale))
    with torch.no_grad():
        out = net(x)
    assert out.shape == (1, 3, 8 * scale, 12 * scale) and out.std() > 1e-2
    torch.testing.assert_close(out, rrdbnet(w, 2, scale, x), rtol=0, atol=1e-10)
