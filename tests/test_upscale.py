"""`srgan upscale`: seamless tiles, images in kind, per-file failures, leftthomas/SRGAN weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import bare_checkpoint, run_cli, skimage_photo
from srgan.files.errors import SrganError
from srgan.inference.imageio import Picture, read_picture, write_png16
from srgan.inference.options import UpscaleOptions
from srgan.inference.tile_grid import tile_grid
from srgan.inference.tiles import upscale_tiled
from srgan.inference.upscale import upscale_picture, upscale_rgb8
from srgan.models import Generator, Runtime
from srgan.models.leftthomas import generator_from_leftthomas, is_leftthomas_state_dict

CPU32 = Runtime(torch.device("cpu"), "fp32")


def random_generator(scale: int, blocks: int, channels: int, seed: int = 0) -> Generator:
    """Random weights, and BN statistics and affines that are not the identity."""
    torch.manual_seed(seed)
    g = Generator(scale, blocks, channels)
    for m in g.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.1, 0.1)
    return g.eval()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    g = random_generator(4, 1, 8)
    bare_checkpoint(path, g)
    return path, g


def photo(name: str, top: int, left: int, height: int, width: int) -> np.ndarray:
    return np.ascontiguousarray(skimage_photo(name)[top : top + height, left : left + width])


# --- tiles ------------------------------------------------------------------


@pytest.mark.parametrize("height, width, tile, pad", [(80, 96, 24, 5), (7, 50, 16, 40), (33, 33, 0, 3)])
def test_tile_grid_covers_the_image_once_with_clipped_context(height, width, tile, pad):
    grid = tile_grid(height, width, tile, pad)
    covered = np.zeros((height, width), dtype=int)
    for t in grid:
        covered[t.top : t.bottom, t.left : t.right] += 1
        assert t.context_top == max(0, t.top - pad) and t.context_bottom == min(height, t.bottom + pad)
        assert t.context_left == max(0, t.left - pad) and t.context_right == min(width, t.right + pad)
        if tile:
            assert t.bottom - t.top <= tile and t.right - t.left <= tile
    assert (covered == 1).all()


def test_tiles_with_the_receptive_radius_as_pad_equal_the_whole_image():
    """A real photo, 96x80 LR: 24 px tiles with pad = receptive radius agree
    with the untiled forward to 1e-4; a pad well below it visibly does not."""
    g = random_generator(4, 2, 8)
    lr = torch.from_numpy(photo("coffee", 100, 150, 80, 96)).permute(2, 0, 1).float() / 255
    radius = g.receptive_radius

    def run(tile: int, pad: int) -> np.ndarray:
        out = np.empty((320, 384, 3), dtype=np.float32)
        upscale_tiled(g, lr, CPU32, out, tile, pad)
        return out

    whole = run(0, 0)
    assert len(tile_grid(80, 96, 24, radius)) == 16
    assert np.abs(run(24, radius) - whole).max() < 1e-4
    assert np.abs(run(24, 2) - whole).max() > 5e-3  # the test can fail: seams are real
    # The uint8 path pastes the same values, rounded.
    out8 = np.empty((320, 384, 3), dtype=np.uint8)
    upscale_tiled(g, lr, CPU32, out8, 24, radius)
    assert np.abs(out8.astype(float) - whole * 255).max() <= 0.5 + 1e-3


@pytest.mark.parametrize("scale", [2, 4, 8])
def test_the_fused_inference_network_computes_the_generators_function(scale):
    """BN folded into the convs: the same output on a real photo, to float rounding."""
    from srgan.inference.fused import fuse_for_inference

    g = random_generator(scale, 2, 8)
    lr = torch.from_numpy(photo("chelsea", 40, 60, 21, 26)).permute(2, 0, 1)[None].float() / 255
    fused = fuse_for_inference(g)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fused.modules())
    assert fused.receptive_radius == g.receptive_radius
    with torch.no_grad():
        assert torch.allclose(fused(lr), g(lr), atol=1e-5)
        assert torch.allclose(fuse_for_inference(g.double())(lr.double()), g.double()(lr.double()), atol=1e-12)
    assert g.training is False and isinstance(g.body[0].bn1, torch.nn.BatchNorm2d)  # the original is untouched


class OutOfMemoryAbove(torch.nn.Module):
    """A generator on a device with room for `pixels` input pixels a forward:
    a larger input raises the error CUDA's allocator raises. Records the
    input sizes it was given."""

    def __init__(self, generator: torch.nn.Module, pixels: int):
        super().__init__()
        self.generator, self.pixels, self.inputs = generator, pixels, []
        self.scale, self.receptive_radius = generator.scale, generator.receptive_radius
        self.arch, self.tile_align = generator.arch, generator.tile_align

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.inputs.append(tuple(x.shape[-2:]))
        if x.shape[-2] * x.shape[-1] > self.pixels:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate for a {tuple(x.shape)} input")
        return self.generator(x)


def test_out_of_memory_halves_the_tile_and_the_output_is_exact(caplog):
    """80x96 LR, room for 2000 input pixels a forward: the whole image (7680)
    and 48 px tiles (40x48 cells and their measured pad) fail, 24 px tiles
    fit. The result is the 24 px tiles' own, bit for bit, and the
    whole image's to within a level."""
    import logging

    from srgan.inference.tile_pad import tile_pad
    from srgan.inference.upscale import inference_network, upscale_pixels

    network = inference_network(random_generator(4, 1, 8), CPU32)
    image = photo("astronaut", 100, 150, 80, 96)
    small = OutOfMemoryAbove(network, 2000)
    pad = tile_pad(small, CPU32)  # measured now, so the forwards below are the upscale's; then cached
    assert pad.how == "measured" and tile_pad(small, CPU32).how == "cached"
    small.inputs.clear()
    with caplog.at_level(logging.WARNING, logger="srgan"):
        out = upscale_pixels(small, image, CPU32, tile=0)  # whole: the pad is looked up only once it must tile
    # the 48 px grid cuts 80 x 96 into cells of 40 x 48, each read with its pad below or to the right
    assert small.inputs[:2] == [(80, 96), (40 + pad.pad, 48 + pad.pad)] and len(small.inputs) == 2 + 16
    assert max(h * w for h, w in small.inputs[2:]) <= 2000
    warnings = [r.getMessage() for r in caplog.records if "out of memory at" in r.getMessage()]
    assert warnings == [
        "out of memory at the whole 96x80 image: tiles of 48 from here",
        "out of memory at tile 48: tiles of 24 from here",
    ], warnings
    assert np.array_equal(out, upscale_pixels(network, image, CPU32, tile=24))
    whole = upscale_pixels(network, image, CPU32, tile=0)
    assert np.abs(out.astype(int) - whole).max() <= 1


def test_out_of_memory_at_the_smallest_tile_is_one_line():
    from srgan.inference.tiles import MIN_TILE
    from srgan.inference.upscale import inference_network, upscale_pixels

    small = OutOfMemoryAbove(inference_network(random_generator(4, 1, 8), CPU32), 100)
    with pytest.raises(SrganError, match=f"out of memory even with {MIN_TILE} px tiles") as refused:
        upscale_pixels(small, photo("astronaut", 100, 150, 80, 96), CPU32, tile=0, pad=2)
    assert "\n" not in str(refused.value)
    # the pad measured once tiles are needed: the probe's own images do not fit either
    with pytest.raises(SrganError, match="out of memory measuring the tile pad on a [0-9]+ px") as refused:
        upscale_pixels(small, photo("astronaut", 100, 150, 80, 96), CPU32, tile=0)
    assert "\n" not in str(refused.value)


# --- reading and writing in kind --------------------------------------------


def test_16_bit_pngs_of_every_colour_type_round_trip(tmp_path):
    """Written through pypng, read back by torchvision's libpng decoder: all 16 bits kept."""
    rng = np.random.default_rng(0)
    samples = rng.integers(0, 65536, (23, 31, 4), dtype=np.uint16)
    path = tmp_path / "p.png"
    for color, alpha in (
        (samples[:, :, 0], None),
        (samples[:, :, 0], samples[:, :, 3]),
        (samples[:, :, :3], None),
        (samples[:, :, :3], samples[:, :, 3]),
    ):
        with open(path, "wb") as f:
            write_png16(f, color, alpha)
        picture = read_picture(path)
        assert picture.bits == 16 and np.array_equal(picture.color, color)
        assert (picture.alpha is None) == (alpha is None)
        if alpha is not None:
            assert np.array_equal(picture.alpha, alpha)
        assert Image.open(path).size == (31, 23)  # a valid PNG to another reader too


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_turns_of_arrays_match_pillows(orientation):
    from PIL import ImageOps

    from srgan.inference.imageio import _exif_upright

    pixels = photo("chelsea", 0, 0, 5, 7)
    im = Image.fromarray(pixels)
    exif = im.getexif()
    exif[0x0112] = orientation
    im.info["exif"] = exif.tobytes()
    expected = np.asarray(ImageOps.exif_transpose(im))
    assert np.array_equal(_exif_upright(pixels, orientation), expected)


def test_16_bit_png_orientation_is_applied(tmp_path):
    """A 16-bit PNG with an EXIF orientation (written by Pillow as grayscale I;16) comes back upright."""
    gray = np.arange(6 * 4, dtype=np.uint16).reshape(6, 4) * 1000
    im = Image.fromarray(gray)
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(tmp_path / "turned16.png", exif=exif)
    upright = read_picture(tmp_path / "turned16.png").color
    assert upright.dtype == np.uint16 and np.array_equal(upright, np.rot90(gray, k=-1))


def test_modes_come_in_as_expected(tmp_path):
    rgb = photo("chelsea", 50, 100, 20, 30)
    Image.fromarray(rgb).convert("P").save(tmp_path / "palette.png")
    picture = read_picture(tmp_path / "palette.png")
    assert picture.color.shape == (20, 30, 3) and picture.alpha is None and picture.bits == 8
    rotated = Image.fromarray(rgb)
    exif = rotated.getexif()
    exif[0x0112] = 6  # stored turned: the upright picture is 30 rows by 20 columns
    rotated.save(tmp_path / "turned.jpg", exif=exif)
    assert read_picture(tmp_path / "turned.jpg").color.shape == (30, 20, 3)
    Image.fromarray(rgb[:, :, 0]).save(tmp_path / "gray.png")
    assert read_picture(tmp_path / "gray.png").gray
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(SrganError, match="broken.png: cannot be decoded"):
        read_picture(tmp_path / "broken.png")


def test_16bit_images_run_in_fp32_under_auto_precision():
    g = random_generator(2, 1, 8)
    rng = np.random.default_rng(1)
    picture = Picture(rng.integers(0, 65536, (12, 10), dtype=np.uint16))
    bf16 = Runtime(torch.device("cpu"), "bf16")
    exact = upscale_picture(g, picture, CPU32, UpscaleOptions())
    assert exact.color.dtype == np.uint16 and exact.color.shape == (24, 20)
    assert np.array_equal(upscale_picture(g, picture, bf16, UpscaleOptions(fp32_for_16bit=True)).color, exact.color)
    assert not np.array_equal(upscale_picture(g, picture, bf16, UpscaleOptions()).color, exact.color)


# --- the command ------------------------------------------------------------


def test_a_folder_of_every_kind_with_a_broken_file(checkpoint, tmp_path):
    path, _ = checkpoint
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    rgb = photo("astronaut", 100, 150, 16, 24)
    rgba = np.dstack([rgb, np.tile(np.linspace(0, 255, 24, dtype=np.uint8), (16, 1))])
    Image.fromarray(rgba).save(src / "rgba.png")
    Image.fromarray(rgb[:, :, 1]).save(src / "gray.png")
    Image.fromarray(rgb).convert("P").save(src / "palette.png")
    Image.fromarray(rgb[:, :, 0].astype(np.uint16) * 257).save(src / "gray16.png")
    with open(src / "rgb16.png", "wb") as f:
        write_png16(f, rgb.astype(np.uint16) * 257)
    turned = Image.fromarray(rgb)
    exif = turned.getexif()
    exif[0x0112] = 8
    turned.save(src / "turned.jpg", exif=exif, quality=95)
    (src / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    result = run_cli("upscale", str(src), "-k", str(path), "-o", str(out), "--device", "cpu")
    assert result.returncode == 1, result.stderr
    assert "1 of 7 images failed" in result.stderr and "broken.jpg: cannot be decoded" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stdout.split()) == 6
    modes = {p.name: (Image.open(p).mode, Image.open(p).size) for p in out.iterdir()}
    assert modes == {
        "rgba_x4.png": ("RGBA", (96, 64)),
        "gray_x4.png": ("L", (96, 64)),
        "palette_x4.png": ("RGB", (96, 64)),
        "gray16_x4.png": ("I;16", (96, 64)),
        "rgb16_x4.png": ("RGB", (96, 64)),  # Pillow shows 8 bits of it; the file holds 16
        "turned_x4.png": ("RGB", (64, 96)),
    }
    alpha = np.asarray(Image.open(out / "rgba_x4.png"))[:, :, 3]
    expected = np.asarray(Image.fromarray(rgba[:, :, 3]).resize((96, 64), Image.BICUBIC))
    assert np.array_equal(alpha, expected)
    rgb16 = read_picture(out / "rgb16_x4.png")
    assert rgb16.bits == 16 and (rgb16.color % 257 != 0).any()  # really 16-bit values
    assert not list(out.glob(".*.tmp"))


def test_formats_suffix_and_outscale(checkpoint, tmp_path):
    path, _ = checkpoint
    rgb = photo("chelsea", 60, 150, 20, 28)
    Image.fromarray(rgb).save(tmp_path / "cat.png")
    Image.fromarray(np.dstack([rgb, np.full((20, 28), 200, np.uint8)])).save(tmp_path / "glass.png")
    out = tmp_path / "out"
    result = run_cli(
        "upscale",
        str(tmp_path / "cat.png"),
        str(tmp_path / "glass.png"),
        "-k",
        str(path),
        "-o",
        str(out),
        "--ext",
        "jpg",
        "--quality",
        "80",
        "--suffix",
        "_big",
        "--outscale",
        "2.5",
        "--tile",
        "8",
    )
    assert result.returncode == 0, result.stderr
    assert Image.open(out / "cat_big.jpg").size == (70, 50)
    assert Image.open(out / "glass_big.png").mode == "RGBA"  # JPEG has no alpha: kept as PNG
    single = run_cli(
        "upscale", str(tmp_path / "cat.png"), "-k", str(path), "-o", str(tmp_path / "one.webp"), "--outscale", "3"
    )
    assert single.returncode == 0, single.stderr
    assert Image.open(tmp_path / "one.webp").size == (84, 60) and single.stdout.strip() == str(tmp_path / "one.webp")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tile", "big"], "--tile: expected auto or a number of pixels >= 0"),
        (["--ext", "gif"], "--ext: expected png, jpg or webp, got 'gif'"),
        (["--alpha", "magic"], "--alpha: expected bicubic or network"),
        (["--outscale", "0"], "--outscale: expected a number > 0"),
        (["-o", "{tmp}/one.png"], "names one file, but there are 2 inputs"),
        (["--suffix", ""], "would overwrite an input image"),
    ],
)
def test_command_mistakes_exit_2_before_any_work(checkpoint, tmp_path, args, message):
    path, _ = checkpoint
    for name in ("a.png", "b.png"):
        Image.fromarray(photo("coffee", 0, 0, 8, 8)).save(tmp_path / name)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = run_cli("upscale", str(tmp_path / "a.png"), str(tmp_path / "b.png"), "-k", str(path), *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # Before any work: nothing written beside the inputs (or at -o), not even a temporary file.
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.png", "b.png"]


# --- leftthomas/SRGAN generators --------------------------------------------


def to_leftthomas(state: dict[str, torch.Tensor], blocks: int, stages: int) -> dict[str, torch.Tensor]:
    """Our names -> leftthomas/SRGAN's (the inverse of the mapping under test)."""
    renamed = {}
    for key, value in state.items():
        part, _, rest = key.partition(".")
        if part == "head":
            new = f"block1.{rest}"
        elif part == "body":
            index, _, rest = rest.partition(".")
            new = f"block{int(index) + 2}.{rest}"
        elif part == "body_end":
            new = f"block{blocks + 2}.{rest}"
        elif part == "upsample":
            new = f"block{blocks + 3}.{rest}"
        else:
            new = f"block{blocks + 3}.{stages}.{rest}"
        renamed[new] = value
    return renamed


def test_leftthomas_state_dict_maps_onto_the_generator():
    ours = random_generator(4, 5, 16)
    theirs = to_leftthomas(ours.state_dict(), blocks=5, stages=2)
    assert {
        "block1.0.weight",
        "block6.bn2.running_var",
        "block7.1.weight",
        "block8.1.prelu.weight",
        "block8.2.weight",
    } <= set(theirs)
    assert is_leftthomas_state_dict(theirs) and not is_leftthomas_state_dict(ours.state_dict())
    mapped = generator_from_leftthomas(theirs).eval()
    assert (mapped.scale, mapped.blocks, mapped.channels) == (4, 5, 16)
    x = torch.rand(1, 3, 12, 10)
    with torch.no_grad():
        assert torch.equal(mapped(x), ours(x))


def test_upscale_with_a_leftthomas_netG_file(tmp_path):
    ours = random_generator(2, 2, 8)
    netg = tmp_path / "netG_epoch_2_100.pth"
    torch.save(to_leftthomas(ours.state_dict(), blocks=2, stages=1), netg)
    lr = photo("coffee", 80, 120, 18, 22)
    Image.fromarray(lr).save(tmp_path / "cup.png")
    result = run_cli("upscale", str(tmp_path / "cup.png"), "-k", str(netg), "--precision", "fp32", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    got = np.asarray(Image.open(tmp_path / "cup_x2.png")).astype(int)
    assert np.abs(got - upscale_rgb8(ours, lr, CPU32).astype(int)).max() <= 1


def test_alpha_through_the_network_and_gray_stays_gray():
    g = random_generator(2, 1, 8)
    rgb = photo("astronaut", 200, 200, 10, 12)
    picture = Picture(rgb[:, :, 0].copy(), rgb[:, :, 1].copy())
    out = upscale_picture(g, picture, CPU32, UpscaleOptions(alpha="network", outscale=1.5))
    assert out.color.shape == (15, 18) and out.alpha.shape == (15, 18) and out.alpha.dtype == np.uint8
    network_alpha = upscale_picture(g, Picture(rgb[:, :, 1].copy()), CPU32, UpscaleOptions(outscale=1.5)).color
    assert np.array_equal(out.alpha, network_alpha)
