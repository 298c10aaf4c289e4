"""The VGG-style (ESRGAN), U-Net (Real-ESRGAN) and PatchGAN (pix2pix, with
spectral norm) discriminators: their parameter names and shapes, their
forward against a plain functional reference written here, and the crops the
loader lets them judge."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_refused, set_args, tiny_overrides
from srgan.configs import load_config
from srgan.files.errors import SrganError
from srgan.models.discriminator_patchgan import PatchGANDiscriminatorSN
from srgan.models.discriminator_unet import UNetDiscriminatorSN, upsample_bilinear_x2
from srgan.models.discriminator_vgg import VGGStyleDiscriminator


def vgg_layout(f: int, crop: int) -> dict[str, tuple]:
    """BasicSR's VGGStyleDiscriminator(3, f) state dict: names and shapes."""
    shapes = {"conv0_0.weight": (f, 3, 3, 3), "conv0_0.bias": (f,), "conv0_1.weight": (f, f, 4, 4)}
    widths = [f, 2 * f, 4 * f, 8 * f, 8 * f]
    for stage in range(5):
        w = widths[stage]
        if stage:
            shapes[f"conv{stage}_0.weight"] = (w, widths[stage - 1], 3, 3)
            shapes[f"conv{stage}_1.weight"] = (w, w, 4, 4)
        for bn in ([f"bn{stage}_0"] if stage else []) + [f"bn{stage}_1"]:
            for name in ("weight", "bias", "running_mean", "running_var"):
                shapes[f"{bn}.{name}"] = (w,)
            shapes[f"{bn}.num_batches_tracked"] = ()
    side = crop // 32
    shapes.update(
        {
            "linear1.weight": (100, 8 * f * side * side),
            "linear1.bias": (100,),
            "linear2.weight": (1, 100),
            "linear2.bias": (1,),
        }
    )
    return shapes


def unet_layout(f: int) -> dict[str, tuple]:
    """Real-ESRGAN's UNetDiscriminatorSN(3, f) state dict (spectral norm's
    weight_orig / weight_u / weight_v on conv1 .. conv8)."""
    convs = {
        1: (2 * f, f, 4),
        2: (4 * f, 2 * f, 4),
        3: (8 * f, 4 * f, 4),
        4: (4 * f, 8 * f, 3),
        5: (2 * f, 4 * f, 3),
        6: (f, 2 * f, 3),
        7: (f, f, 3),
        8: (f, f, 3),
    }
    shapes = {"conv0.weight": (f, 3, 3, 3), "conv0.bias": (f,), "conv9.weight": (1, f, 3, 3), "conv9.bias": (1,)}
    for i, (c_out, c_in, k) in convs.items():
        shapes[f"conv{i}.weight_orig"] = (c_out, c_in, k, k)
        shapes[f"conv{i}.weight_u"] = (c_out,)
        shapes[f"conv{i}.weight_v"] = (c_in * k * k,)
    return shapes


def random_state(layout: dict[str, tuple], seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in layout.items():
        if name.endswith("num_batches_tracked"):
            state[name] = torch.tensor(7)
        elif name.endswith("running_var"):
            state[name] = torch.rand(shape, generator=gen) + 0.5
        else:
            state[name] = torch.randn(shape, generator=gen) * 0.2
    for name in [n for n in state if n.endswith("weight_orig")]:
        # spectral norm's u, v: the leading singular vectors, as training leaves them
        w = state[name].reshape(state[name].shape[0], -1)
        u = F.normalize(torch.randn(w.shape[0], generator=gen), dim=0)
        for _ in range(50):
            v = F.normalize(w.t() @ u, dim=0)
            u = F.normalize(w @ v, dim=0)
        state[name.replace("orig", "u")], state[name.replace("orig", "v")] = u, v
    return state


def assert_has_layout(ours, layout: dict[str, tuple]) -> None:
    """`ours`' state dict has exactly these names and shapes, and loads a random one of them strictly."""
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == layout
    ours.load_state_dict(random_state(layout, 0), strict=True)


@pytest.mark.parametrize("f, crop", [(64, 128), (8, 64), (4, 32)])
def test_vgg_discriminator_has_basicsr_names_and_shapes(f, crop):
    assert_has_layout(VGGStyleDiscriminator(f, crop), vgg_layout(f, crop))


def test_unet_discriminator_has_real_esrgan_names_and_shapes():
    assert_has_layout(UNetDiscriminatorSN(64), unet_layout(64))


def test_vgg_discriminator_computes_basicsr_forward():
    """Eval mode (running statistics), against BasicSR's forward written with torch.nn.functional."""
    f, crop = 4, 64
    state = random_state(vgg_layout(f, crop), 1)
    ours = VGGStyleDiscriminator(f, crop)
    ours.load_state_dict(state)
    ours.eval()
    x = torch.rand(3, 3, crop, crop, generator=torch.Generator().manual_seed(2))

    def bn(t, name):
        return F.batch_norm(
            t,
            state[f"{name}.running_mean"],
            state[f"{name}.running_var"],
            state[f"{name}.weight"],
            state[f"{name}.bias"],
            training=False,
            eps=1e-5,
        )

    feat = F.leaky_relu(F.conv2d(x, state["conv0_0.weight"], state["conv0_0.bias"], padding=1), 0.2)
    feat = F.leaky_relu(bn(F.conv2d(feat, state["conv0_1.weight"], stride=2, padding=1), "bn0_1"), 0.2)
    for stage in range(1, 5):
        feat = F.leaky_relu(bn(F.conv2d(feat, state[f"conv{stage}_0.weight"], padding=1), f"bn{stage}_0"), 0.2)
        feat = F.leaky_relu(
            bn(F.conv2d(feat, state[f"conv{stage}_1.weight"], stride=2, padding=1), f"bn{stage}_1"), 0.2
        )
    feat = F.leaky_relu(F.linear(feat.reshape(3, -1), state["linear1.weight"], state["linear1.bias"]), 0.2)
    expected = F.linear(feat, state["linear2.weight"], state["linear2.bias"])
    got = ours(x)
    assert got.shape == (3, 1)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
    # channels_last (the training default) computes the same
    ours_cl = ours.to(memory_format=torch.channels_last)
    assert torch.allclose(ours_cl(x.contiguous(memory_format=torch.channels_last)), expected, rtol=1e-5, atol=1e-6)


def test_unet_discriminator_computes_real_esrgan_forward():
    """Eval mode (spectral norm with the stored u, v: sigma = u . W v), a logit
    per pixel, against Real-ESRGAN's forward written with torch.nn.functional
    (F.interpolate's bilinear upsampling, where ours avoids its kernel)."""
    f = 4
    state = random_state(unet_layout(f), 3)
    ours = UNetDiscriminatorSN(f)
    ours.load_state_dict(state)
    ours.eval()
    x = torch.rand(2, 3, 24, 40, generator=torch.Generator().manual_seed(4))

    def conv(t, i, stride=1, padding=1):
        weight = state[f"conv{i}.weight_orig"]
        sigma = state[f"conv{i}.weight_u"] @ weight.reshape(weight.shape[0], -1) @ state[f"conv{i}.weight_v"]
        return F.leaky_relu(F.conv2d(t, weight / sigma, stride=stride, padding=padding), 0.2)

    def up(t):
        return F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False)

    x0 = F.leaky_relu(F.conv2d(x, state["conv0.weight"], state["conv0.bias"], padding=1), 0.2)
    x1 = conv(x0, 1, 2)
    x2 = conv(x1, 2, 2)
    x3 = conv(x2, 3, 2)
    x4 = conv(up(x3), 4) + x2
    x5 = conv(up(x4), 5) + x1
    x6 = conv(up(x5), 6) + x0
    expected = F.conv2d(conv(conv(x6, 7), 8), state["conv9.weight"], state["conv9.bias"], padding=1)
    got = ours(x)
    assert got.shape == (2, 1, 24, 40)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)


def patchgan_layout(f: int, layers: int) -> dict[str, tuple]:
    """pix2pix's NLayerDiscriminator(3, f, layers) without its norm layers
    (model.0, .2, .4, ...: conv then LeakyReLU), spectral norm on every conv
    but the last."""
    widths = [f * min(2**i, 8) for i in range(layers + 1)]
    shapes: dict[str, tuple] = {}
    c_in = 3
    for i, c_out in enumerate(widths):
        shapes |= {
            f"model.{2 * i}.bias": (c_out,),
            f"model.{2 * i}.weight_orig": (c_out, c_in, 4, 4),
            f"model.{2 * i}.weight_u": (c_out,),
            f"model.{2 * i}.weight_v": (c_in * 16,),
        }
        c_in = c_out
    last = 2 * (layers + 1)
    return shapes | {f"model.{last}.weight": (1, c_in, 4, 4), f"model.{last}.bias": (1,)}


@pytest.mark.parametrize("f, layers", [(64, 3), (8, 2), (4, 5)])
def test_patchgan_has_pix2pix_names_and_shapes(f, layers):
    assert_has_layout(PatchGANDiscriminatorSN(f, layers), patchgan_layout(f, layers))


def test_patchgan_computes_the_n_layer_forward_with_spectral_norm():
    """Eval mode (sigma = u . W v from the stored vectors), against pix2pix's
    n-layer forward written with torch.nn.functional: 4x4 convs, stride 2
    then 1, LeakyReLU 0.2, a logit per patch of (H / 8 - 2) x (W / 8 - 2)."""
    f, layers = 4, 3
    state = random_state(patchgan_layout(f, layers), 5)
    ours = PatchGANDiscriminatorSN(f, layers)
    ours.load_state_dict(state)
    ours.eval()
    x = torch.rand(2, 3, 48, 64, generator=torch.Generator().manual_seed(6))
    t = x
    for i in range(layers + 1):
        weight = state[f"model.{2 * i}.weight_orig"]
        sigma = (
            state[f"model.{2 * i}.weight_u"] @ weight.reshape(weight.shape[0], -1) @ state[f"model.{2 * i}.weight_v"]
        )
        t = F.conv2d(t, weight / sigma, state[f"model.{2 * i}.bias"], stride=2 if i < layers else 1, padding=1)
        t = F.leaky_relu(t, 0.2)
    last = 2 * (layers + 1)
    expected = F.conv2d(t, state[f"model.{last}.weight"], state[f"model.{last}.bias"], padding=1)
    got = ours(x)
    assert got.shape == (2, 1, 48 // 8 - 2, 64 // 8 - 2)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_patchgan_judges_70_pixel_patches():
    """With 3 layers each logit sees a 70x70 patch (pix2pix's 70x70 PatchGAN):
    the top-left one reads input rows and columns -23 .. 46 (the paddings)."""
    torch.manual_seed(0)
    d = PatchGANDiscriminatorSN(4, 3).eval()
    x = torch.rand(1, 3, 96, 96)
    base = d(x)[0, 0, 0, 0]
    for (row, col), seen in {(46, 46): True, (0, 46): True, (47, 0): False, (0, 47): False}.items():
        y = x.clone()
        y[0, :, row, col] += 1.0
        assert (d(y)[0, 0, 0, 0] != base).item() == seen, (row, col)


def test_patchgan_training_keeps_each_layer_s_largest_singular_value_near_1():
    """Spectral norm's power iteration, run by each forward in training mode:
    the weights a conv applies have spectral norm 1 (of the weight reshaped to
    out x in*k*k), whatever the stored ones' scale."""
    torch.manual_seed(0)
    d = PatchGANDiscriminatorSN(8, 2)
    with torch.no_grad():
        for module in d.modules():
            if hasattr(module, "weight_orig"):
                module.weight_orig.mul_(10)
    for _ in range(30):
        d(torch.rand(1, 3, 32, 32))
    convs = [m for m in d.modules() if hasattr(m, "weight_orig")]
    assert len(convs) == 3
    for conv in convs:
        assert torch.linalg.matrix_norm(conv.weight.reshape(conv.weight.shape[0], -1), 2).item() == pytest.approx(
            1.0, abs=1e-3
        )


def test_a_patchgan_state_dict_is_recognised_with_its_width_and_depth():
    from srgan.models.community import recognise_discriminator

    found = recognise_discriminator(PatchGANDiscriminatorSN(16, 4).state_dict(), "d.pth")
    assert found.model == {"discriminator": "patchgan", "d_channels": 16, "patchgan_layers": 4}


def test_deterministic_upsampling_is_bilinear_with_its_gradient():
    for shape in [(2, 3, 5, 7), (1, 2, 1, 4), (1, 1, 8, 8)]:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(5), requires_grad=True)
        ours = upsample_bilinear_x2(x)
        theirs = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        assert torch.allclose(ours, theirs, atol=1e-6)
        g = torch.randn(theirs.shape, generator=torch.Generator().manual_seed(6))
        (ga,) = torch.autograd.grad(ours, x, g)
        (gb,) = torch.autograd.grad(theirs, x, g)
        assert torch.allclose(ga, gb, atol=1e-5)


def test_spectral_norm_discriminator_builds_on_meta_for_the_checkpoint_check():
    from srgan.models import build_discriminator

    config = load_config("demo", ["gan.discriminator=unet", "model.d_channels=8"])
    with torch.device("meta"):
        d = build_discriminator(config)
    assert set(d.state_dict()) == set(unet_layout(8))


@pytest.mark.parametrize(
    "setting, crop, culprit",
    [
        ("gan.discriminator=vgg", 48, "data.crop_size: expected a multiple of 32 up to 512 with gan.discriminator vgg"),
        (
            "gan.discriminator=vgg",
            544,
            "data.crop_size: expected a multiple of 32 up to 512 with gan.discriminator vgg",
        ),
        ("gan.discriminator=unet", 36, "data.crop_size: expected a multiple of 8 with gan.discriminator unet"),
        ("gan.discriminator=patch", 32, "gan.discriminator: expected one of srgan, vgg, unet, patchgan"),
        (
            "gan.discriminator=patchgan",
            16,
            "data.crop_size: expected at least 24 px with gan.discriminator patchgan and 3 layers",
        ),
        ("gan.patchgan_layers=7", 32, "gan.patchgan_layers: expected 1 to 6 stride-2 layers, got 7"),
    ],
)
def test_a_crop_the_discriminator_cannot_judge_is_refused(srgan, tmp_path, photo_dir, setting, crop, culprit):
    overrides = tiny_overrides(photo_dir, tmp_path / "run", setting, f"data.crop_size={crop}")
    result = srgan("train", *set_args(overrides))
    assert_refused(result, culprit)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", ["vgg", "unet", "patchgan"])
def test_a_run_trains_and_resumes_with_each_discriminator(srgan, tmp_path, photo_dir, kind):
    """Two GAN steps with the relativistic objective, a checkpoint that
    holds the discriminator's own state dict, and a resume that refuses
    another discriminator naming the key."""
    from srgan.training.state import load_checkpoint

    run = tmp_path / "run"
    overrides = tiny_overrides(photo_dir, run, f"gan.discriminator={kind}", "gan.d_loss=relativistic", "train.epochs=3")
    assert srgan("train", *set_args(overrides)).returncode == 0
    state = load_checkpoint(run)
    layout = {"vgg": vgg_layout(8, 32), "unet": unet_layout(8), "patchgan": patchgan_layout(8, 3)}[kind]
    assert {k: tuple(v.shape) for k, v in state["discriminator"].items()} == layout
    assert all(torch.isfinite(v).all() for v in state["discriminator"].values())
    more = [*set_args([*overrides, "train.max_steps=3"])]
    assert srgan("train", "--resume", str(run), *more).returncode == 0
    assert load_checkpoint(run)["step"] == 3
    other = "unet" if kind == "vgg" else "vgg"
    result = srgan(
        "train", "--resume", str(run), *set_args([*overrides, f"gan.discriminator={other}", "train.max_steps=4"])
    )
    assert_refused(result, f"gan.discriminator '{kind}' -> '{other}'")


def test_gan_init_from_a_patchgan_file_takes_its_width_and_depth(tmp_path):
    """gan.init_from a PatchGAN state dict with the config silent on the
    discriminator: the run builds the file's (width 8, 2 layers) and loads it strictly."""
    from srgan.models import build_discriminator
    from srgan.training.init_from import read_init_files

    torch.save(PatchGANDiscriminatorSN(8, 2).state_dict(), tmp_path / "d.pth")
    (tmp_path / "mine.yaml").write_text(f"gan:\n  init_from: {tmp_path / 'd.pth'}\n")
    init = read_init_files(load_config(str(tmp_path / "mine.yaml")))
    gan, model = init.config.gan, init.config.model
    assert (gan.discriminator, gan.patchgan_layers, model.d_channels) == ("patchgan", 2, 8)
    assert init.discriminator is not None
    build_discriminator(init.config).load_state_dict(init.discriminator, strict=True)
    with pytest.raises(SrganError, match="has 2 PatchGAN layers, the config asks for 3 PatchGAN layers"):
        read_init_files(load_config(str(tmp_path / "mine.yaml"), ["gan.patchgan_layers=3"]))
