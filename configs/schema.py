"""The typed configuration: every choice of a run, with the paper's SRGAN
settings as defaults. The loader (`srgan.configs.loader`) types a YAML
document into these dataclasses and the checks (`srgan.configs.checks`)
validate it, once; the rest of the program trusts them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args


@dataclass
class ModelConfig:
    # The generator (models/build.py): srresnet, SRGAN's SRResNet (the paper's);
    # rrdb, ESRGAN's RRDBNet; compact, Real-ESRGAN's SRVGGNetCompact; or one of
    # spandrel's SR architectures (span, dat, swinir, ...: `srgan config archs`),
    # built from model.options. The keys only some of them take, and the scales
    # srgan's own offer: ARCH_KEYS, ARCH_SCALES.
    arch: str = "srresnet"
    scale: Literal[1, 2, 3, 4, 8] = 4
    blocks: int = 16  # residual blocks in the generator (rrdb: RRDBs; compact: 3x3 convs)
    channels: int = 64  # feature channels of the generator
    growth: int = 32  # rrdb: the channels each dense-block conv adds (ESRGAN: 32)
    d_channels: int = 64  # the discriminator's first width (64 .. 8x64 in the paper)
    # batch: BatchNorm in the generator's residual blocks, as the paper's SRResNet;
    # none: without (EDSR, ESRGAN).
    norm: Literal["batch", "none"] = "batch"
    # none: the paper's output, tanh; bicubic: a correction added to the
    # bicubic upscale of the input (VDSR's global residual): it starts at bicubic.
    residual: Literal["none", "bicubic"] = "none"
    res_scale: float = 1.0  # residual branches scaled by this (EDSR: 0.1 for wide stacks without BN)
    icnr: bool = False  # sub-pixel convs start as nearest-neighbour upsampling (no checkerboard at start)
    # The generator weights this run starts from: a checkpoint or run folder
    # (a trained SRResNet before the GAN phase), or a community file of an
    # arch srgan trains (BasicSR/Real-ESRGAN/ESRGAN .pth, SRVGGNetCompact,
    # leftthomas/SRGAN, .safetensors). The model keys the config leaves out
    # are taken from the file; those it gives must agree with it.
    init_from: str | None = None
    # spandrel's architectures: their constructor's options by name (SPAN's
    # feature_channels, DAT's embed_dim, ...); the run's config.yaml lists
    # every one, defaults included (models/spandrel_archs.py checks them).
    options: dict[str, Any] = field(default_factory=dict)


# The model.* keys that only some architectures have: configs/checks.py
# refuses a config naming one with another arch, and the config written
# into a run folder or checkpoint leaves them out.
OWN_ARCHS = ("srresnet", "rrdb", "compact")
ARCH_KEYS = {
    "blocks": OWN_ARCHS,
    "channels": OWN_ARCHS,
    "norm": ("srresnet",),
    "residual": ("srresnet",),
    "res_scale": ("srresnet",),
    "icnr": ("srresnet",),
    "growth": ("rrdb",),
}
# srresnet: x2 sub-pixel stages (x3: one x3 stage); rrdb: 4x on a body of a
# quarter of the output's size (the input pixel-unshuffled for x1 and x2);
# compact: one PixelShuffle of any factor.


def arch_has_key(arch: str, key: str) -> bool:
    """Whether model.<key> applies to model.arch: ARCH_KEYS for srgan's own
    architectures; model.options to spandrel's (any other arch) only."""
    if key == "options":
        return arch not in OWN_ARCHS
    return key not in ARCH_KEYS or arch in ARCH_KEYS[key]


ARCH_SCALES = {"srresnet": (2, 3, 4, 8), "rrdb": (1, 2, 4), "compact": (1, 2, 3, 4, 8)}


# data.train / data.val naming the photos that come with scikit-image.
BUILTIN_SAMPLES = "builtin:samples"


# Real-ESRGAN's second-order degradation (data.degradation: realesrgan), read by
# data/degradations.py. Defaults are Real-ESRGAN's: options/train_realesrgan_x4plus.yml
# (the first stage: blur_kernel_size .. betap_range, resize_prob .. jpeg_range; the
# second: the same keys ending in 2; final_sinc_prob) and the constants of
# realesrgan/data/realesrgan_dataset.py and realesrgan/models/realesrgan_model.py.
# Ranges are [min, max], drawn uniformly; docs/degradations.md says what each does.


@dataclass
class KernelMix:
    # Probabilities of the blur kernel's shape (sum 1); Real-ESRGAN's kernel_prob.
    iso: float = 0.45  # isotropic Gaussian
    aniso: float = 0.25  # anisotropic Gaussian, rotated
    generalized_iso: float = 0.12  # generalized Gaussian exp(-r^(2 beta)/2), beta from betag
    generalized_aniso: float = 0.03
    plateau_iso: float = 0.12  # plateau 1 / (1 + r^(2 beta)), beta from betap
    plateau_aniso: float = 0.03


@dataclass
class BlurConfig:
    # Odd kernel sides drawn uniformly (Real-ESRGAN: 7, 9, .., 21).
    kernel_sizes: list[int] = field(default_factory=lambda: [7, 9, 11, 13, 15, 17, 19, 21])
    kernels: KernelMix = field(default_factory=KernelMix)
    sigma: list[float] = field(default_factory=lambda: [0.2, 3.0])  # blur_sigma, px (both axes)
    betag: list[float] = field(default_factory=lambda: [0.5, 4.0])  # betag_range: generalized Gaussian shape
    betap: list[float] = field(default_factory=lambda: [1.0, 2.0])  # betap_range: plateau shape
    # A 2D sinc (circular low-pass: ringing) instead of the kernels above: sinc_prob.
    sinc_prob: float = 0.1
    # Its cutoff, in units of pi: kernels of 13 px and more (Real-ESRGAN: pi/5 .. pi) ...
    sinc_cutoff: list[float] = field(default_factory=lambda: [0.2, 1.0])
    # ... and smaller ones (pi/3 .. pi: a small kernel cannot hold a low cutoff).
    sinc_cutoff_small: list[float] = field(default_factory=lambda: [1 / 3, 1.0])


@dataclass
class ResizeConfig:
    # Probabilities of scaling up, down, or keeping the size (sum 1): resize_prob.
    up: float = 0.2
    down: float = 0.7
    keep: float = 0.1
    range: list[float] = field(default_factory=lambda: [0.15, 1.5])  # resize_range: down from min, up to max
    # Interpolations drawn uniformly (Real-ESRGAN: all three).
    modes: list[Literal["area", "bilinear", "bicubic"]] = field(default_factory=lambda: ["area", "bilinear", "bicubic"])


@dataclass
class NoiseConfig:
    gaussian_prob: float = 0.5  # Gaussian noise with this probability, else Poisson
    gaussian_sigma: list[float] = field(default_factory=lambda: [1.0, 30.0])  # noise_range, on 0..255
    poisson_scale: list[float] = field(default_factory=lambda: [0.05, 3.0])  # poisson_scale_range
    gray_prob: float = 0.4  # the same noise on all three channels (gray_noise_prob)


@dataclass
class DegradationStage:
    blur_prob: float = 1.0  # the first stage always blurs; the second: second_blur_prob
    blur: BlurConfig = field(default_factory=BlurConfig)
    resize: ResizeConfig = field(default_factory=ResizeConfig)
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    # JPEG quality, drawn as an integer (Pillow's); the second stage's is the final step's.
    jpeg_quality: list[float] = field(default_factory=lambda: [30.0, 95.0])


def _second_stage() -> DegradationStage:
    return DegradationStage(
        blur_prob=0.8,  # second_blur_prob
        blur=BlurConfig(sigma=[0.2, 1.5]),  # blur_sigma2 (the rest as the first stage's)
        resize=ResizeConfig(up=0.3, down=0.4, keep=0.3, range=[0.3, 1.2]),  # resize_prob2, resize_range2
        noise=NoiseConfig(gaussian_sigma=[1.0, 25.0], poisson_scale=[0.05, 2.5]),  # noise_range2, ..
        jpeg_quality=[30.0, 95.0],  # jpeg_range2
    )


@dataclass
class FinalStep:
    # The resize to the LR size then a 2D sinc, and JPEG (second.jpeg_quality),
    # in random order: Real-ESRGAN's two orders, each of probability 1/2.
    sinc_prob: float = 0.8  # final_sinc_prob
    sinc_cutoff: list[float] = field(default_factory=lambda: [1 / 3, 1.0])  # units of pi
    sinc_first_prob: float = 0.5  # [resize + sinc] before JPEG with this probability, else after
    modes: list[Literal["area", "bilinear", "bicubic"]] = field(default_factory=lambda: ["area", "bilinear", "bicubic"])


@dataclass
class RealEsrganDegradation:
    first: DegradationStage = field(default_factory=DegradationStage)
    second: DegradationStage = field(default_factory=_second_stage)
    final: FinalStep = field(default_factory=FinalStep)


@dataclass
class DataConfig:
    # A folder of images (searched recursively) or `builtin:samples`.
    train: str = "builtin:samples"
    # As `train`; null turns validation off.
    val: str | None = "builtin:samples"
    # Paired data (docs/paired.md): a folder of LR images, each matched to the
    # HR image of `train` (`val`) with the same relative path less its
    # extension, used instead of bicubic downscales; null: made by bicubic.
    train_lr: str | None = None
    val_lr: str | None = None
    crop_size: int = 96  # HR crop side; a multiple of model.scale
    batch_size: int = 16
    workers: int = 2  # DataLoader worker processes; 0 loads in the training process
    # Random crops taken from every training image per epoch (BasicSR's
    # dataset_enlarge_ratio): small folders still give full epochs.
    repeat: int = 1
    # Keep the decoded training images in memory when they fit in this many
    # MB (decoding a photo per crop costs more than the crop); 0 = never.
    cache_mb: int = 2048
    # Validation centre-crops its images to at most this many HR pixels a
    # side (0 = whole image), which bounds validation time on big photos.
    val_max_size: int = 0
    # How the LR is made from an HR crop: bicubic, PIL's bicubic downscale (the
    # literature's); realesrgan, Real-ESRGAN's second-order pipeline, set by
    # data.realesrgan (a key refused with bicubic, as ARCH_KEYS are).
    degradation: Literal["bicubic", "realesrgan"] = "bicubic"
    realesrgan: RealEsrganDegradation = field(default_factory=RealEsrganDegradation)

    @property
    def pipeline(self) -> RealEsrganDegradation | None:
        """The degradation pipeline's settings, None for bicubic: what the
        datasets take."""
        return self.realesrgan if self.degradation == "realesrgan" else None


@dataclass
class LossWeights:
    image: float = 0.0
    adversarial: float = 1e-3
    perceptual: float = 6e-3
    tv: float = 0.0
    # Artefact and colour terms (losses/ldl.py, frequency.py, ms_ssim.py, colour.py), 0: off.
    ldl: float = 0.0  # LDL's artefact map (Liang et al. 2022); needs train.ema_decay > 0
    ffl: float = 0.0  # focal frequency loss (Jiang et al. 2021)
    ms_ssim: float = 0.0  # alpha (1 - MS-SSIM) + (1 - alpha) L1 (Zhao et al. 2017)
    colour: float = 0.0  # L1 of the low-passed chroma (Cb, Cr)
    luma: float = 0.0  # L1 of the luma (Y)


@dataclass
class MsSsimConfig:
    # The mix of loss.weights.ms_ssim: alpha (1 - MS-SSIM) + (1 - alpha) L1; 0.84 is Zhao et al.'s.
    alpha: float = 0.84
    # rgb: on the three channels (MS-SSIM their mean); y: on BT.601 luma alone.
    channel: Literal["rgb", "y"] = "rgb"


@dataclass
class ColourConfig:
    # The colour loss compares the chroma averaged over blocks of this many
    # pixels a side: texture may move within a block, its colour may not.
    window: int = 8


@dataclass
class FrequencyConfig:
    # The focal frequency loss's weight exponent: each frequency's error to this power.
    alpha: float = 1.0


@dataclass
class PerceptualConfig:
    network: Literal["vgg16", "vgg19"] = "vgg19"
    # conv<b>_<i>, relu<b>_<i> or pool<b>: the last VGG layer kept, e.g.
    # relu5_4 (the paper's phi_5,4), pool5 (leftthomas' features[:31]) or
    # conv5_4 (ESRGAN's: before the activation). null when `layers` is given.
    layer: str | None = "relu5_4"
    # imagenet: torchvision's weights (cache or download), refuse to run without;
    # auto: imagenet if loadable, else random features with a warning;
    # none: random features; anything else: a state-dict file.
    weights: str = "imagenet"
    # Several layers at once, layer name -> weight (Real-ESRGAN:
    # {conv1_2: 0.1, conv2_2: 0.1, conv3_4: 1, conv4_4: 1, conv5_4: 1}); the
    # loss is the weighted sum. Given, it replaces `layer` (which is then null).
    layers: dict[str, float] | None = None
    # The distance between feature maps: mse (the paper's) or l1 (ESRGAN's).
    criterion: Literal["mse", "l1"] = "mse"


@dataclass
class SharpenTargets:
    # Which terms compare with an unsharp-masked HR rather than the HR itself
    # (Real-ESRGAN's l1_gt_usm, percep_gt_usm, gan_gt_usm; losses/sharpen.py).
    image: bool = False
    perceptual: bool = False
    adversarial: bool = False  # D's real examples

    @property
    def any(self) -> bool:
        return self.image or self.perceptual or self.adversarial


@dataclass
class LossConfig:
    image: Literal["mse", "l1"] = "mse"
    weights: LossWeights = field(default_factory=LossWeights)
    perceptual: PerceptualConfig = field(default_factory=PerceptualConfig)
    sharpen_targets: SharpenTargets = field(default_factory=SharpenTargets)
    ms_ssim: MsSsimConfig = field(default_factory=MsSsimConfig)
    colour: ColourConfig = field(default_factory=ColourConfig)
    ffl: FrequencyConfig = field(default_factory=FrequencyConfig)


@dataclass
class GanConfig:
    # bce: the paper's -log D(x) - log(1 - D(G(z))) (and -log D(G(z)) for G);
    # linear: 1 - D(x) + D(G(z)) (and 1 - D(G(z)) for G), as leftthomas/SRGAN.
    # relativistic: ESRGAN's relativistic average GAN; D: BCE of C(x) - E[C(G(z))]
    # toward 1 and of C(G(z)) - E[C(x)] toward 0, each half weighted 1/2; G: the
    # same with the targets swapped. C is D's logit; the means are over the batch
    # (and over pixels for the U-Net and PatchGAN Ds). hinge: max(0, 1 - C(x)) +
    # max(0, 1 + C(G(z))) (and -C(G(z)) for G). lsgan: (C(x) - 1)^2 + C(G(z))^2
    # (and (C(G(z)) - 1)^2 for G), as BasicSR's.
    d_loss: Literal["bce", "linear", "relativistic", "hinge", "lsgan"] = "bce"
    # retain_graph: d_loss.backward(retain_graph=True) through D(G(z));
    # detach: D(G(z).detach()). The same mathematics either way.
    update: Literal["retain_graph", "detach"] = "retain_graph"
    # srgan: the paper's (any crop). vgg: ESRGAN's VGG-style D (BasicSR's
    # VGGStyleDiscriminator; crops a multiple of 32, up to 512 px). unet:
    # Real-ESRGAN's U-Net with spectral norm, a logit per pixel (crops a
    # multiple of 8). patchgan: pix2pix's n-layer PatchGAN with spectral norm in
    # place of its BatchNorm, a logit per 70x70 patch with 3 layers (crops of at
    # least 2^layers x 3 px). model.d_channels is the first width of each.
    discriminator: Literal["srgan", "vgg", "unet", "patchgan"] = "srgan"
    # The PatchGAN's stride-2 convolutions (pix2pix's n_layers): 3 judges 70 px
    # patches, each more about doubles the patch.
    patchgan_layers: int = 3
    # R1 gradient penalty on real images (Mescheder et al. 2018): D's loss gains
    # r1 / 2 * E[|grad_x C(x)|^2]. 0: off. Lazy, as StyleGAN2: computed on one
    # step in r1_every, scaled by r1_every so that its average pull is the same.
    r1: float = 0.0
    r1_every: int = 16
    # Steps over which the adversarial weight rises linearly from 0 to
    # loss.weights.adversarial, from the first GAN step (after train.pretrain_steps).
    warmup_steps: int = 0
    # The discriminator weights this run starts from: an srgan checkpoint or
    # run folder, or a BasicSR/Real-ESRGAN state dict (RealESRGAN_x4plus_netD.pth
    # for unet; VGGStyleDiscriminator for vgg), .pth or .safetensors. As
    # model.init_from: gan.discriminator and model.d_channels come from the
    # file where the config leaves them out.
    init_from: str | None = None


@dataclass
class LrSchedule:
    # Steps at which the schedule multiplies both learning rates by `gamma`,
    # e.g. the paper's SRGAN: 1e-4, then 1e-5 for the second half.
    milestones: list[int] = field(default_factory=list)
    gamma: float = 0.1
    # step: the milestones alone. cosine: also a cosine decay, to `min_factor`
    # of the rate, over the generator-only phase (train.pretrain_steps, or the
    # whole run when there is no pretraining: SRResNet).
    kind: Literal["step", "cosine"] = "step"
    min_factor: float = 0.01
    # Steps over which the rates rise linearly from 0 at the start of the run.
    warmup_steps: int = 0


# Image quality metrics (metrics/): PSNR and SSIM on Y; LPIPS (AlexNet;
# lpips_vgg: VGG16) and DISTS, learned distances on RGB that need ImageNet weights;
# ciede2000, the colour drift (metrics/colour.py): its mean, 99th percentile and
# the a*/b* shifts, lower is better (best_by follows the mean).
MetricName = Literal["psnr", "ssim", "lpips", "lpips_vgg", "dists", "ciede2000"]
METRIC_NAMES: tuple[str, ...] = get_args(MetricName)


@dataclass
class TrainConfig:
    epochs: int = 100
    max_steps: int = 0  # 0 = no limit; otherwise the run stops after this many steps
    # Steps of the generator alone on the image loss before the GAN phase
    # (the paper's SRResNet initialisation, in the same run).
    pretrain_steps: int = 0
    # Write checkpoints/pretrained.pt, the generator as that phase ends, when
    # it has steps: the smooth end of `srgan interpolate` against the run's GAN generator.
    save_pretrained: bool = True
    lr_g: float = 1e-4
    lr_d: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # Adam's
    lr_schedule: LrSchedule = field(default_factory=LrSchedule)
    # auto (CUDA when available), cpu, cuda or cuda:K. Under torchrun each rank
    # takes cuda:LOCAL_RANK (auto or cuda) or the CPU.
    device: str = "auto"
    # auto: bf16 autocast where the device runs bf16 fast, else fp32.
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    channels_last: bool = True  # NHWC activations (faster convolutions on CPU and GPU)
    compile: bool = False  # torch.compile the networks (slow to start; see docs/performance.md)
    seed: int = 0
    # Sum the gradients of this many micro-batches (of data.batch_size /
    # accumulate crops each) before each optimizer step, for both networks:
    # a GPU that cannot hold the batch at once still trains on it.
    accumulate: int = 1
    # Clip each network's gradient to this total (L2) norm before its optimizer
    # step; 0: off. When on, g_grad_norm and d_grad_norm (the norms before
    # clipping) are logged, and g_clipped / d_clipped: the share of steps clipped.
    grad_clip: float = 0.0
    # The crops each forward and backward takes (data.batch_size a multiple of
    # it); the step sums data.batch_size / micro_batch of them, so the update
    # is the batch's whatever it is. auto: the largest that fits the memory at
    # hand, measured on a trial step before the first (docs/training.md
    # "Memory"); train.accumulate > 1 pins it to data.batch_size / accumulate.
    micro_batch: int | Literal["auto"] = "auto"
    # Deterministic kernels only (torch.use_deterministic_algorithms, oneDNN's and
    # cuDNN's deterministic modes): a config and a seed fix the bits. false: the
    # fastest kernels, which may add in a different order from run to run.
    deterministic: bool = True
    log_every: int = 10  # steps between logged rows (and progress-bar updates)
    val_every: int = 0  # steps between validations; 0 = at the end of every epoch
    # What validation scores; lpips, lpips_vgg and dists need ImageNet weights (docs/training.md "Reading the numbers").
    val_metrics: list[MetricName] = field(default_factory=lambda: ["psnr", "ssim"])
    best_by: MetricName = (
        "psnr"  # the val_metrics entry that picks checkpoints/best.pt (lower is better for learned ones and ciede2000)
    )
    save_every: int = 0  # steps between writes of checkpoints/last.pt; 0 = at epoch ends only
    checkpoint_every: int = 1  # epochs between kept checkpoints/epoch_NNN.pt
    # Exponential moving average of the generator's weights (BasicSR's
    # net_g_ema), e.g. 0.999; 0 = off. Validation and upscaling use it.
    ema_decay: float = 0.0
    tensorboard: bool = False  # also write TensorBoard scalars and images (needs tensorboard)
    # Redraw curves.png at each epoch end (a second or so on a CPU); false: the
    # CSV files alone, which `srgan plot` draws when asked.
    curves: bool = True
    # Under torchrun: BatchNorm statistics over the whole global batch (CUDA only);
    # false: each rank normalises its own share of the batch.
    sync_bn: bool = False
    # Under torchrun: a collective that waits longer than this stops every rank
    # (a rank that died must not hang the others).
    dist_timeout_s: int = 600
    run_dir: str = ""  # empty: runs/<name>-<timestamp>


@dataclass
class Config:
    name: str = "srgan"  # names the run folder
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    gan: GanConfig = field(default_factory=GanConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # The dotted keys the YAML, the preset and --set gave (the others hold
    # defaults), as the loader found them; model.init_from and gan.init_from
    # fill the keys left open from their files. Not a setting: never read
    # from nor written to a config file.
    given_keys: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
