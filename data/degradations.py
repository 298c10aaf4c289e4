"""Real-ESRGAN's second-order degradation (Wang et al. 2021, "Real-ESRGAN:
Training Real-World Blind Super-Resolution with Pure Synthetic Data"): an HR
crop becomes a realistic LR image by blur, resize, noise and JPEG, twice,
then a resize to the LR size with a sinc filter and JPEG in random order.

Functions of (image, random generator) -> image, one per step, composed by
`degrade`, which reads the typed config (configs/schema.py,
RealEsrganDegradation). Images are 3xHxW float32 tensors in [0, 1]; every
random choice and the noise come from the NumPy generator passed in, so a sample's generator, derived from
(seed, epoch, index) by data/datasets.py, fixes its bits wherever it runs.
They run per sample in the DataLoader workers (docs/degradations.md has the
measurement that chose that)."""

from __future__ import annotations

import io
import math
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from srgan.configs.schema import BlurConfig, DegradationStage, NoiseConfig, RealEsrganDegradation, ResizeConfig

# --------------------------------------------------------------- kernels


def _quadratic_form(size: int, sigma_x: float, sigma_y: float, theta: float) -> np.ndarray:
    """[x y] S^-1 [x y]^T on a size x size grid centred on 0, S the covariance
    of axes sigma_x, sigma_y rotated by theta."""
    half = size // 2
    y, x = np.mgrid[-half : half + 1, -half : half + 1].astype(np.float64)
    cos, sin = math.cos(theta), math.sin(theta)
    u, v = cos * x + sin * y, -sin * x + cos * y  # the grid in the kernel's own axes
    return (u / sigma_x) ** 2 + (v / sigma_y) ** 2


def gaussian_kernel(size: int, sigma_x: float, sigma_y: float, theta: float) -> np.ndarray:
    """A (rotated, anisotropic when sigma_x != sigma_y) Gaussian, summing to 1."""
    kernel = np.exp(-0.5 * _quadratic_form(size, sigma_x, sigma_y, theta))
    return kernel / kernel.sum()


def generalized_gaussian_kernel(size: int, sigma_x: float, sigma_y: float, theta: float, beta: float) -> np.ndarray:
    """exp(-q^beta / 2): flatter than a Gaussian for beta > 1, peakier below."""
    kernel = np.exp(-0.5 * _quadratic_form(size, sigma_x, sigma_y, theta) ** beta)
    return kernel / kernel.sum()


def plateau_kernel(size: int, sigma_x: float, sigma_y: float, theta: float, beta: float) -> np.ndarray:
    """1 / (1 + q^beta): a flat top with heavy tails."""
    with np.errstate(over="ignore"):  # q^beta past float range far out: 1 / (1 + inf) = 0, as it should
        kernel = 1 / (1 + _quadratic_form(size, sigma_x, sigma_y, theta) ** beta)
    return kernel / kernel.sum()


def sinc_kernel(size: int, cutoff: float) -> np.ndarray:
    """The 2D circular low-pass filter of `cutoff` radians (pi: none), cut
    to size x size: ringing and overshoot, as sharpening and JPEG leave."""
    half = size // 2
    y, x = np.mgrid[-half : half + 1, -half : half + 1].astype(np.float64)
    radius = np.hypot(x, y)
    bessel = torch.special.bessel_j1(torch.from_numpy(cutoff * radius)).numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        kernel = cutoff * bessel / (2 * math.pi * radius)
    kernel[half, half] = cutoff**2 / (4 * math.pi)  # the limit at r = 0
    return kernel / kernel.sum()


def _uniform(rng: np.random.Generator, bounds: list[float]) -> float:
    return float(rng.uniform(bounds[0], bounds[1]))


def _shape_beta(rng: np.random.Generator, bounds: list[float]) -> float:
    """Half the time below 1, half above (Real-ESRGAN's draw: both sides of a Gaussian equally often)."""
    low, high = bounds
    if rng.random() < 0.5:
        return _uniform(rng, [min(low, 1.0), min(high, 1.0)])
    return _uniform(rng, [max(low, 1.0), max(high, 1.0)])


def random_kernel(blur: BlurConfig, rng: np.random.Generator) -> np.ndarray:
    """One blur kernel as the config draws it: a sinc with probability
    sinc_prob, else one of the six shapes of blur.kernels."""
    size = int(rng.choice(blur.kernel_sizes))
    if rng.random() < blur.sinc_prob:
        cutoffs = blur.sinc_cutoff_small if size < 13 else blur.sinc_cutoff
        return sinc_kernel(size, _uniform(rng, cutoffs) * math.pi)
    shapes, weights = zip(*vars(blur.kernels).items(), strict=True)
    shape = str(shapes[rng.choice(len(shapes), p=np.array(weights) / sum(weights))])
    sigma_x = _uniform(rng, blur.sigma)
    sigma_y, theta = sigma_x, 0.0
    if shape.endswith("aniso"):
        sigma_y, theta = _uniform(rng, blur.sigma), _uniform(rng, [-math.pi, math.pi])
    if shape.startswith("generalized"):
        return generalized_gaussian_kernel(size, sigma_x, sigma_y, theta, _shape_beta(rng, blur.betag))
    if shape.startswith("plateau"):
        return plateau_kernel(size, sigma_x, sigma_y, theta, _shape_beta(rng, blur.betap))
    return gaussian_kernel(size, sigma_x, sigma_y, theta)


# --------------------------------------------------------------- steps


def blur(image: torch.Tensor, kernel: np.ndarray) -> torch.Tensor:
    """The image filtered by `kernel` (each channel alike), borders reflected
    (replicated where the image is smaller than the kernel's half). By FFT,
    which costs a fraction of a convolution with the kernel as its weight at
    Real-ESRGAN's kernel sizes (docs/degradations.md has the timings)."""
    pad = kernel.shape[0] // 2
    height, width = image.shape[-2:]
    mode = "reflect" if pad < min(height, width) else "replicate"
    padded = F.pad(image[None], (pad, pad, pad, pad), mode=mode)[0]
    # a transform length of small primes, which the FFT runs faster (docs/degradations.md);
    # longer than the padded image, the wrap-around stays within the part cut away below
    size = (_fast_length(padded.shape[-2]), _fast_length(padded.shape[-1]))
    # every kernel here is symmetric under a half turn: correlation is convolution
    spectrum = torch.fft.rfft2(torch.from_numpy(kernel.astype(np.float32)), s=size)
    filtered = torch.fft.irfft2(torch.fft.rfft2(padded, s=size) * spectrum, s=size)
    # the circular convolution's valid part: the kernel's centre at (pad, pad) shifts it by pad
    return filtered[:, 2 * pad : 2 * pad + height, 2 * pad : 2 * pad + width].contiguous()


def _fast_length(n: int) -> int:
    """The smallest length >= n whose only prime factors are 2, 3 and 5."""
    while True:
        m = n
        for prime in (2, 3, 5):
            while m % prime == 0:
                m //= prime
        if m == 1:
            return n
        n += 1


def resize(image: torch.Tensor, size: tuple[int, int], mode: str) -> torch.Tensor:
    """area, bilinear or bicubic (torch's, as Real-ESRGAN) to size (h, w), at least 1 px a side."""
    size = (max(1, size[0]), max(1, size[1]))
    corners = {"align_corners": False} if mode in ("bilinear", "bicubic") else {}
    return F.interpolate(image[None], size=size, mode=mode, **corners)[0]


def resize_factor(settings: ResizeConfig, rng: np.random.Generator) -> float:
    """Up (1 .. range max), down (range min .. 1) or keep (1), by their probabilities."""
    odds = np.array([settings.up, settings.down, settings.keep])
    way = rng.choice(3, p=odds / odds.sum())
    if way == 0:
        return _uniform(rng, [1.0, settings.range[1]])
    if way == 1:
        return _uniform(rng, [settings.range[0], 1.0])
    return 1.0


def _levels(image: torch.Tensor) -> float:
    """Real-ESRGAN's Poisson 'photon count': the distinct 8-bit values of the
    image, rounded up to a power of 2."""
    values = torch.bincount((image * 255).round().clamp(0, 255).to(torch.int64).flatten(), minlength=256)
    return float(2 ** math.ceil(math.log2(max(1, int((values > 0).sum())))))


def add_noise(image: torch.Tensor, settings: NoiseConfig, rng: np.random.Generator) -> torch.Tensor:
    """Gaussian (sigma on 0..255) or Poisson (shot noise, scaled) noise, in
    colour or gray (one field for the three channels), clipped to [0, 1]."""
    gray = rng.random() < settings.gray_prob
    if rng.random() < settings.gaussian_prob:
        sigma = _uniform(rng, settings.gaussian_sigma) / 255
        channels = 1 if gray else 3
        field = torch.from_numpy(rng.standard_normal((channels, *image.shape[-2:]), dtype=np.float32)) * sigma
    else:
        strength = _uniform(rng, settings.poisson_scale)
        base = image
        if gray:  # BT.601 luma, as torchvision's rgb_to_grayscale
            base = (0.299 * image[0] + 0.587 * image[1] + 0.114 * image[2])[None]
        base = (base * 255).round().clamp(0, 255) / 255
        levels = _levels(base)
        counts = torch.from_numpy(rng.poisson(base.numpy() * levels).astype(np.float32))
        field = (counts / levels - base) * strength
    return (image + field).clamp(0, 1)


def jpeg(image: torch.Tensor, quality: int) -> torch.Tensor:
    """The image encoded and decoded by Pillow's libjpeg at `quality` (4:2:0,
    its default). torchvision.io's encoder is faster but deprecated since
    torchvision 0.29."""
    pixels = (image * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    with Image.open(buffer) as decoded:
        return torch.from_numpy(np.array(decoded.convert("RGB"))).permute(2, 0, 1).float().div_(255)


def _quality(rng: np.random.Generator, bounds: list[float]) -> int:
    return int(round(_uniform(rng, bounds)))


def _mode(rng: np.random.Generator, modes: list) -> str:
    return str(modes[int(rng.integers(len(modes)))])


# --------------------------------------------------------------- the pipeline


def degradation_stage(
    image: torch.Tensor,
    stage: DegradationStage,
    rng: np.random.Generator,
    size_of_one: tuple[int, int],
) -> torch.Tensor:
    """Blur (with stage.blur_prob), a random resize of `size_of_one` (the
    size a factor of 1 gives), noise: one stage, without its JPEG."""
    kernel = random_kernel(stage.blur, rng)  # drawn whether used or not: the draws stay aligned
    if rng.random() < stage.blur_prob:
        image = blur(image, kernel)
    factor = resize_factor(stage.resize, rng)
    image = resize(image, (int(size_of_one[0] * factor), int(size_of_one[1] * factor)), _mode(rng, stage.resize.modes))
    return add_noise(image, stage.noise, rng)


def degrade(hr: torch.Tensor, scale: int, settings: RealEsrganDegradation, rng: np.random.Generator) -> torch.Tensor:
    """3xHxW HR in [0, 1] -> 3x(H/scale)x(W/scale) LR in [0, 1] on the 8-bit grid:
    Real-ESRGAN's realesrgan_model.py feed_data, step by step. On one thread,
    as in a DataLoader worker, also when called in the training process
    (data.workers 0): ops on one small image gain nothing from more threads,
    and lose much on a busy machine (docs/degradations.md)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _degrade(hr, scale, settings, rng)
    finally:
        torch.set_num_threads(threads)


def _degrade(hr: torch.Tensor, scale: int, settings: RealEsrganDegradation, rng: np.random.Generator) -> torch.Tensor:
    height, width = hr.shape[-2:]
    lr_size = (height // scale, width // scale)
    # the first stage: resized relative to the HR, then JPEG
    out = degradation_stage(hr, settings.first, rng, (height, width))
    out = jpeg(out, _quality(rng, settings.first.jpeg_quality))
    # the second: resized relative to the LR size; its JPEG is the final step's
    out = degradation_stage(out, settings.second, rng, lr_size)
    final = settings.final
    kernel = None
    if rng.random() < final.sinc_prob:
        size = int(rng.choice(settings.second.blur.kernel_sizes))  # Real-ESRGAN's final sinc takes these sizes too
        kernel = sinc_kernel(size, _uniform(rng, final.sinc_cutoff) * math.pi)
    quality = _quality(rng, settings.second.jpeg_quality)
    mode = _mode(rng, final.modes)
    sinc_first = rng.random() < final.sinc_first_prob
    if not sinc_first:
        out = jpeg(out, quality)
    out = resize(out, lr_size, mode)
    if kernel is not None:
        out = blur(out, kernel)
    if sinc_first:
        out = jpeg(out, quality)
    return (out * 255).round().clamp(0, 255) / 255


def named_generator(seed: int, name: str) -> np.random.Generator:
    """The generator of a fixed degradation of the image called `name`
    (validation, `srgan evaluate --degrade`): the same LR on every call and
    whatever other images are scored with it."""
    return np.random.default_rng((seed, zlib.crc32(name.encode("utf-8", "surrogateescape"))))
