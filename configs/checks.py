"""The checks of a `Config`, the one place that validates one: they run
after the loader (configs/loader.py) has typed it, whether it came from a
YAML file, `--set` or a checkpoint. One function checks each section, always
in the same order, so that of two mistakes the same one is always reported.

Each error names the origin (a file, --set, a checkpoint), the dotted key
and what was expected."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from typing import Any

from srgan.configs.networks import VGG_BLOCKS, generator_parameters, perceptual_layers, vgg_layer_count, vgg_pool_count
from srgan.configs.schema import ARCH_KEYS, ARCH_SCALES, BUILTIN_SAMPLES, OWN_ARCHS, Config, arch_has_key
from srgan.files.errors import SrganError

# Upper bounds on what a config may ask for, which the checks apply before
# srgan allocates anything, whether the config comes from the user or from
# a checkpoint: far above any published SRResNet/SRGAN (16 blocks, 64
# channels), far below what would exhaust memory while building the networks.
LIMITS = {
    "model.blocks": 128,
    "model.channels": 512,
    "model.growth": 512,
    "model.d_channels": 256,
    "data.crop_size": 2048,
    "data.batch_size": 4096,
    "data.workers": 256,
    "data.repeat": 1_000_000,
}
# An RRDBNet's size grows with blocks x (channels + growth)^2: the limits
# above allow one of billions of weights, so its count is bounded too, by
# the largest SRResNet they allow (128 blocks x 512 channels).
MAX_GENERATOR_PARAMETERS = 610_000_000
MAX_SEED = 2**32 - 1  # NumPy's legacy seed is 32-bit
LDL_WINDOW = 7  # LDL's local variance window (losses/ldl.py WINDOW)
MS_SSIM_WINDOW = 11  # MS-SSIM's Gaussian window (losses/ms_ssim.py WINDOW): the least crop of one scale
USM_REACH = 25  # the unsharp mask's 51 x 51 blur (losses/sharpen.py): pixels read each side
MAX_KERNEL_SIZE = 41  # a degradation blur kernel's side (Real-ESRGAN's largest: 21)
# train.device and the commands' --device: the devices srgan resolves (models/runtime.py).
DEVICE_PATTERN = r"auto|cpu|cuda(:\d{1,3})?"
DEVICES = "auto, cpu, cuda or cuda:K"


def is_device(name: str) -> bool:
    """Whether `name` is a device srgan resolves: auto, cpu, cuda or cuda:K."""
    return re.fullmatch(DEVICE_PATTERN, name) is not None


def check_config(config: Config, raw: dict, origin: str = "config") -> None:
    """Check a typed config against the plain dict it came from (`raw`: which
    keys were given); raise SrganError naming `origin`, the key and what was
    expected at the first mistake. Resolves loss.perceptual.layer to null
    when loss.perceptual.layers is given."""
    _one_perceptual_layer_setting(config, raw, origin)
    _check_arch_keys(config, raw, origin)
    for check in (
        _check_name,
        _check_limits,
        _check_model,
        _check_data,
        _check_val_metrics,
        _check_data_loading,
        _check_loss,
        _check_gan,
        _check_crops,
        _check_accumulate,
        _check_train,
    ):
        check(config, origin)
    _check_degradation(config, raw, origin)


def _need(origin: str) -> Callable[[bool, str, str, Any], None]:
    """need(ok, key, expected, got): refuses `got` at `key` unless ok."""

    def need(ok: bool, key: str, expected: str, got: Any) -> None:
        if not ok:
            raise SrganError(f"{origin}: {key}: expected {expected}, got {got!r}")

    return need


def _one_perceptual_layer_setting(config: Config, raw: dict, origin: str) -> None:
    """loss.perceptual.layers replaces loss.perceptual.layer: the resolved
    config holds layer null then, and this refuses a config that names both
    (it could mean either)."""
    perceptual = config.loss.perceptual
    given = (raw.get("loss") or {}).get("perceptual") or {}  # mappings: _build checked them
    if perceptual.layers is not None:
        if given.get("layer") is not None:
            raise SrganError(
                f"{origin}: loss.perceptual: layer {given['layer']!r} and layers both given; layers "
                "replaces layer: set one of them to null"
            )
        perceptual.layer = None
    elif perceptual.layer is None:
        raise SrganError(
            f"{origin}: loss.perceptual.layer: expected a VGG layer such as relu5_4 (null only "
            "with loss.perceptual.layers), got null"
        )


def _check_arch_keys(config: Config, raw: dict, origin: str) -> None:
    """A key the config names must apply to its model.arch. Only the keys
    named count (the dataclass holds every key, with defaults): the
    written configs (config_to_dict) leave out those of other archs, so
    they load again."""
    arch = config.model.arch
    for key in raw.get("model") or {}:
        if not arch_has_key(arch, str(key)):
            archs = " and ".join(ARCH_KEYS[key]) if key in ARCH_KEYS else "spandrel's (srgan config archs)"
            raise SrganError(f"{origin}: model.{key}: applies to model.arch {archs} only, not {arch} (leave it out)")


def _check_name(c: Config, origin: str) -> None:
    """name: it names the run folder runs/<name>-<time>."""
    need = _need(origin)
    need(
        c.name.strip() not in ("", ".", "..") and "/" not in c.name and "\\" not in c.name,
        "name",
        "a non-empty name without '/'",
        c.name,
    )
    # runs/<name>-<time>: a file name is at most 255 bytes
    need(len(c.name.encode("utf-8")) <= 200, "name", "at most 200 bytes (it names the run folder)", c.name[:40] + "...")


def _check_limits(c: Config, origin: str) -> None:
    """The LIMITS, before anything is allocated."""
    need = _need(origin)
    for key, limit in LIMITS.items():
        section, name = key.split(".")
        value = getattr(getattr(c, section), name)
        need(value <= limit, key, f"at most {limit:,} (a limit of srgan's, far above any published model)", value)


def _check_model(c: Config, origin: str) -> None:
    """model: the generator by model.arch (schema.ARCH_SCALES; rrdb: its size, from growth too)."""
    need = _need(origin)
    need(c.model.blocks >= 1, "model.blocks", "at least 1", c.model.blocks)
    need(c.model.channels >= 1, "model.channels", "at least 1", c.model.channels)
    need(c.model.d_channels >= 1, "model.d_channels", "at least 1", c.model.d_channels)
    need(0 < c.model.res_scale <= 1, "model.res_scale", "a factor in (0, 1]", c.model.res_scale)
    if c.model.arch not in OWN_ARCHS:  # spandrel's: models/spandrel_archs.py checks them against their constructors
        need(c.model.arch.isidentifier(), "model.arch", "an architecture's name (srgan config archs)", c.model.arch)
        return
    scales = ARCH_SCALES[c.model.arch]
    need(
        c.model.scale in scales,
        "model.scale",
        f"{', '.join(map(str, scales[:-1]))} or {scales[-1]} with model.arch {c.model.arch}",
        c.model.scale,
    )
    need(c.model.growth >= 1, "model.growth", "at least 1", c.model.growth)
    parameters = generator_parameters(c.model.arch, c.model.scale, c.model.blocks, c.model.channels, c.model.growth)
    if parameters > MAX_GENERATOR_PARAMETERS:
        raise SrganError(
            f"{origin}: model: an {c.model.arch} of {c.model.blocks} blocks x {c.model.channels} "
            f"channels (growth {c.model.growth}) has {parameters:,} weights, more than srgan's limit "
            f"of {MAX_GENERATOR_PARAMETERS:,}"
        )


def _check_data(c: Config, origin: str) -> None:
    """data: the image folders, the crop against model.scale, paired data, the batch."""
    need = _need(origin)
    need(c.data.train != "", "data.train", "a folder or builtin:samples", c.data.train)
    need(c.data.val != "", "data.val", "a folder, builtin:samples or null", c.data.val)
    need(
        c.data.crop_size >= c.model.scale, "data.crop_size", f"at least model.scale ({c.model.scale})", c.data.crop_size
    )
    need(
        c.data.crop_size % c.model.scale == 0,
        "data.crop_size",
        f"a multiple of model.scale ({c.model.scale})",
        c.data.crop_size,
    )
    _check_paired_data(c, origin)
    need(c.data.batch_size >= 1, "data.batch_size", "at least 1", c.data.batch_size)


def _check_paired_data(c: Config, origin: str) -> None:
    """data.train_lr / data.val_lr: a folder beside a folder (or prepared set)
    of HR images; the built-in samples have no LR partners."""
    d = c.data
    for lr_key, lr_value, hr_key, hr_value in (
        ("data.train_lr", d.train_lr, "data.train", d.train),
        ("data.val_lr", d.val_lr, "data.val", d.val),
    ):
        if lr_value is None:
            continue
        if lr_value == "":
            raise SrganError(f"{origin}: {lr_key}: expected a folder of LR images or null, got ''")
        if hr_value is None:
            raise SrganError(f"{origin}: {lr_key}: given while {hr_key} is null (the LR images need their HR partners)")
        if hr_value == BUILTIN_SAMPLES:
            raise SrganError(
                f"{origin}: {lr_key}: paired data needs {hr_key} to be a folder of HR images, not {BUILTIN_SAMPLES} "
                "(the sample photos have no LR partners)"
            )
    if d.train_lr is not None and d.degradation != "bicubic":
        raise SrganError(
            f"{origin}: data.degradation: {d.degradation} with data.train_lr: the LR images are given, there is "
            "nothing to degrade (set data.degradation: bicubic, or data.train_lr: null)"
        )


def _check_val_metrics(c: Config, origin: str) -> None:
    """train.val_metrics, and train.best_by among them."""
    need = _need(origin)
    metrics = c.train.val_metrics
    need(
        bool(metrics) and len(set(metrics)) == len(metrics), "train.val_metrics", "a list of distinct metrics", metrics
    )
    if c.train.best_by not in metrics:
        raise SrganError(
            f"{origin}: train.best_by: {c.train.best_by} is not among train.val_metrics ({', '.join(metrics)}): "
            "add it there or pick one of those"
        )


def _check_data_loading(c: Config, origin: str) -> None:
    """data: workers, repeats, the cache and the validation images' size cap."""
    need = _need(origin)
    need(c.data.workers >= 0, "data.workers", "0 or more", c.data.workers)
    need(c.data.repeat >= 1, "data.repeat", "at least 1", c.data.repeat)
    need(c.data.cache_mb >= 0, "data.cache_mb", "0 (never) or more MB", c.data.cache_mb)
    need(c.data.val_max_size >= 0, "data.val_max_size", "0 (no cap) or more", c.data.val_max_size)
    smallest_val = 2 * c.model.scale + 11  # the SSIM window once `scale` px are shaved from each border
    need(
        c.data.val_max_size == 0 or c.data.val_max_size - c.data.val_max_size % c.model.scale >= smallest_val,
        "data.val_max_size",
        f"0 or at least {smallest_val} px (the SSIM window after the border shave)",
        c.data.val_max_size,
    )


def _check_loss(c: Config, origin: str) -> None:
    """loss: the weights, the perceptual loss's VGG layers, and the crop they need."""
    need = _need(origin)
    for term in ("image", "adversarial", "perceptual", "tv", "ldl", "ffl", "ms_ssim", "colour", "luma"):
        weight = getattr(c.loss.weights, term)
        need(weight >= 0, f"loss.weights.{term}", "a weight of 0 or more", weight)
    _check_artefact_terms(c, origin)
    network = c.loss.perceptual.network
    key = "loss.perceptual.layer" if c.loss.perceptual.layers is None else "loss.perceptual.layers"
    for layer, weight in perceptual_layers(c.loss.perceptual).items():
        if vgg_layer_count(network, layer) is None:
            blocks = len(VGG_BLOCKS[network])
            last = VGG_BLOCKS[network][-1]
            raise SrganError(
                f"{origin}: {key}: expected a {network} layer such as relu5_{last}, "
                f"conv2_2 or pool{blocks}, got {layer!r}"
            )
        need(weight > 0, f"{key}.{layer}", "a positive weight (leave a layer out rather than weight it 0)", weight)
    need(c.loss.perceptual.layers != {}, key, "at least one layer", c.loss.perceptual.layers)
    need(
        c.loss.perceptual.weights != "",
        "loss.perceptual.weights",
        "imagenet, auto, none or a file path",
        c.loss.perceptual.weights,
    )
    if c.loss.weights.perceptual > 0:
        for layer in perceptual_layers(c.loss.perceptual):
            pools = vgg_pool_count(network, layer)
            need(
                c.data.crop_size >= 2**pools,
                "data.crop_size",
                f"at least {2**pools} px: {key} {layer} comes after {pools} 2x2 poolings",
                c.data.crop_size,
            )


def _check_artefact_terms(c: Config, origin: str) -> None:
    """loss: the options of LDL, FFL, MS-SSIM and the colour loss, and what
    each needs of the crop and of train.ema_decay when it is weighted."""
    need, w, crop = _need(origin), c.loss.weights, c.data.crop_size
    need(0 <= c.loss.ms_ssim.alpha <= 1, "loss.ms_ssim.alpha", "a mix in [0, 1]", c.loss.ms_ssim.alpha)
    need(c.loss.ffl.alpha > 0, "loss.ffl.alpha", "an exponent above 0", c.loss.ffl.alpha)
    need(c.loss.colour.window >= 1, "loss.colour.window", "a block of at least 1 px", c.loss.colour.window)
    if w.ldl > 0:
        # BasicSR's LDL models need net_g_ema too: without it there is no map to refine
        need(
            c.train.ema_decay > 0,
            "train.ema_decay",
            "a decay in (0, 1) with loss.weights.ldl above 0 (LDL's artefact map is refined by the EMA "
            "generator's residual)",
            c.train.ema_decay,
        )
        need(
            crop >= LDL_WINDOW,
            "data.crop_size",
            f"at least {LDL_WINDOW} px with loss.weights.ldl (its "
            f"{LDL_WINDOW}x{LDL_WINDOW} window is reflected at the border)",
            crop,
        )
    if w.ms_ssim > 0:
        need(
            crop >= MS_SSIM_WINDOW,
            "data.crop_size",
            f"at least {MS_SSIM_WINDOW} px with loss.weights.ms_ssim (one {MS_SSIM_WINDOW}x{MS_SSIM_WINDOW} "
            "window; 5 scales need 176 px, a smaller crop takes fewer)",
            crop,
        )
    if w.colour > 0:
        need(
            crop >= c.loss.colour.window,
            "loss.colour.window",
            f"a block no larger than data.crop_size ({crop} px) with loss.weights.colour",
            c.loss.colour.window,
        )


def _check_crops(c: Config, origin: str) -> None:
    """data.crop_size against the discriminator and the sharpened targets."""
    need = _need(origin)
    crop = c.data.crop_size
    if c.gan.discriminator == "vgg":
        need(
            crop % 32 == 0 and crop <= 512,
            "data.crop_size",
            "a multiple of 32 up to 512 with gan.discriminator vgg (five stride-2 stages, then a dense layer "
            "over the (crop/32)^2 positions left, which grows with the crop's area)",
            crop,
        )
    if c.gan.discriminator == "unet":
        need(
            crop % 8 == 0,
            "data.crop_size",
            "a multiple of 8 with gan.discriminator unet (three stride-2 convs, whose outputs its "
            "upsampling path adds back)",
            crop,
        )
    if c.gan.discriminator == "patchgan":
        smallest = 3 * 2**c.gan.patchgan_layers
        need(
            crop >= smallest,
            "data.crop_size",
            f"at least {smallest} px with gan.discriminator patchgan and {c.gan.patchgan_layers} layers (each "
            "stride-2 conv halves the crop, then two 4x4 convs each take a pixel off)",
            crop,
        )
    if c.loss.sharpen_targets.any:
        need(
            c.data.crop_size > USM_REACH,
            "data.crop_size",
            f"more than {USM_REACH} px with loss.sharpen_targets (the unsharp mask's blur reads {USM_REACH} px "
            "each side, reflected at the border)",
            c.data.crop_size,
        )


def _check_gan(c: Config, origin: str) -> None:
    """The PatchGAN's depth (the crop it needs: _check_crops, next), R1, the
    adversarial warm-up and gradient clipping."""
    need, g = _need(origin), c.gan
    need(1 <= g.patchgan_layers <= 6, "gan.patchgan_layers", "1 to 6 stride-2 layers", g.patchgan_layers)
    need(g.r1 >= 0, "gan.r1", "0 (off) or a positive weight", g.r1)
    need(g.r1_every >= 1, "gan.r1_every", "at least 1 (steps between R1 penalties)", g.r1_every)
    need(
        not (g.r1 > 0 and c.train.compile),
        "train.compile",
        "false with gan.r1 (the penalty differentiates D's input gradient; torch.compile has no double backward)",
        c.train.compile,
    )
    need(g.warmup_steps >= 0, "gan.warmup_steps", "0 (off) or more steps", g.warmup_steps)
    need(c.train.grad_clip >= 0, "train.grad_clip", "0 (off) or a positive gradient norm", c.train.grad_clip)


def _check_accumulate(c: Config, origin: str) -> None:
    """train.accumulate and train.micro_batch: gradient accumulation splits a
    batch evenly, and the two keys say the same split when both are given."""
    need = _need(origin)
    t, batch = c.train, c.data.batch_size
    need(t.accumulate >= 1, "train.accumulate", "at least 1 (micro-batches a step)", t.accumulate)
    need(
        batch % t.accumulate == 0,
        "data.batch_size",
        f"a multiple of train.accumulate ({t.accumulate}): each step takes that many equal micro-batches",
        batch,
    )
    if t.micro_batch == "auto":
        return
    need(t.micro_batch >= 1, "train.micro_batch", "auto or at least 1 (crops a forward)", t.micro_batch)
    need(
        batch % t.micro_batch == 0,
        "train.micro_batch",
        f"auto or a divisor of data.batch_size ({batch}): each step takes equal micro-batches",
        t.micro_batch,
    )
    need(
        t.accumulate in (1, batch // t.micro_batch),
        "train.accumulate",
        f"1 or {batch // t.micro_batch} with train.micro_batch {t.micro_batch} of data.batch_size {batch} "
        "(they say the same split: give one of them)",
        t.accumulate,
    )


def _check_train(c: Config, origin: str) -> None:
    """train: epochs, seed, device, learning rates and their schedule, the cadences."""
    need = _need(origin)
    t = c.train
    need(t.epochs >= 1, "train.epochs", "at least 1", t.epochs)
    need(0 <= t.seed <= MAX_SEED, "train.seed", f"0 to {MAX_SEED}", t.seed)
    need(
        is_device(t.device),
        "train.device",
        DEVICES,
        t.device,
    )
    need(t.dist_timeout_s >= 10, "train.dist_timeout_s", "at least 10 seconds", t.dist_timeout_s)
    need(t.max_steps >= 0, "train.max_steps", "0 (no limit) or more", t.max_steps)
    need(t.pretrain_steps >= 0, "train.pretrain_steps", "0 or more", t.pretrain_steps)
    need(t.lr_g > 0, "train.lr_g", "a positive learning rate", t.lr_g)
    need(t.lr_d > 0, "train.lr_d", "a positive learning rate", t.lr_d)
    need(len(t.betas) == 2 and all(0 <= b < 1 for b in t.betas), "train.betas", "two numbers in [0, 1)", t.betas)
    milestones = t.lr_schedule.milestones
    need(
        all(m >= 1 for m in milestones) and milestones == sorted(set(milestones)),
        "train.lr_schedule.milestones",
        "increasing step numbers of at least 1",
        milestones,
    )
    need(t.lr_schedule.gamma > 0, "train.lr_schedule.gamma", "a positive factor", t.lr_schedule.gamma)
    need(
        0 <= t.lr_schedule.min_factor <= 1,
        "train.lr_schedule.min_factor",
        "a factor in [0, 1]",
        t.lr_schedule.min_factor,
    )
    need(t.lr_schedule.warmup_steps >= 0, "train.lr_schedule.warmup_steps", "0 or more", t.lr_schedule.warmup_steps)
    need(
        t.lr_schedule.kind != "cosine" or t.pretrain_steps > 0 or t.max_steps > 0,
        "train.lr_schedule.kind",
        "step, or cosine with train.pretrain_steps or train.max_steps set (the span of the decay)",
        t.lr_schedule.kind,
    )
    need(t.log_every >= 1, "train.log_every", "at least 1", t.log_every)
    need(t.val_every >= 0, "train.val_every", "0 (every epoch) or more steps", t.val_every)
    need(t.save_every >= 0, "train.save_every", "0 (every epoch) or more steps", t.save_every)
    need(0 <= t.ema_decay < 1, "train.ema_decay", "0 (off) or a decay in (0, 1)", t.ema_decay)
    need(t.checkpoint_every >= 1, "train.checkpoint_every", "at least 1 (epochs)", t.checkpoint_every)


def _check_degradation(c: Config, raw: dict, origin: str) -> None:
    """data.realesrgan: named only with data.degradation realesrgan (as
    ARCH_KEYS: a setting that would do nothing is a mistake to report);
    every range [min, max] with min <= max, every probability in [0, 1],
    the probabilities of one choice summing to 1."""
    if c.data.degradation != "realesrgan":
        if "realesrgan" in (raw.get("data") or {}):
            raise SrganError(
                f"{origin}: data.realesrgan: applies to data.degradation realesrgan only, not "
                f"{c.data.degradation} (leave it out, or set data.degradation: realesrgan)"
            )
        return

    def need(ok: bool, key: str, expected: str, got: Any) -> None:
        if not ok:
            raise SrganError(f"{origin}: data.realesrgan.{key}: expected {expected}, got {got!r}")

    def probability(key: str, value: float) -> None:
        need(0 <= value <= 1, key, "a probability in [0, 1]", value)

    def span(key: str, value: list[float], low: float, high: float, what: str) -> None:
        need(len(value) == 2, key, f"[min, max] ({what})", value)
        need(value[0] <= value[1], key, f"[min, max] with min <= max ({what})", value)
        need(low <= value[0] and value[1] <= high, key, f"a range within [{low:g}, {high:g}] ({what})", value)

    def sums_to_one(key: str, values: dict[str, float]) -> None:
        for name, value in values.items():
            probability(f"{key}.{name}", value)
        total = sum(values.values())
        need(abs(total - 1) <= 1e-6, key, f"probabilities {', '.join(values)} summing to 1", round(total, 9))

    def modes(key: str, value: typing.Sequence[str]) -> None:
        need(len(value) >= 1 and len(set(value)) == len(value), key, "one or more distinct modes", value)

    r = c.data.realesrgan
    for name, stage in (("first", r.first), ("second", r.second)):
        probability(f"{name}.blur_prob", stage.blur_prob)
        blur = stage.blur
        sizes = blur.kernel_sizes
        need(
            len(sizes) >= 1 and all(3 <= k <= MAX_KERNEL_SIZE and k % 2 == 1 for k in sizes),
            f"{name}.blur.kernel_sizes",
            f"one or more odd sizes from 3 to {MAX_KERNEL_SIZE}",
            sizes,
        )
        sums_to_one(f"{name}.blur.kernels", dataclasses.asdict(blur.kernels))
        span(f"{name}.blur.sigma", blur.sigma, 0.01, 100, "px")
        span(f"{name}.blur.betag", blur.betag, 0.01, 100, "a shape, 1 a Gaussian")
        span(f"{name}.blur.betap", blur.betap, 0.01, 100, "a shape")
        probability(f"{name}.blur.sinc_prob", blur.sinc_prob)
        span(f"{name}.blur.sinc_cutoff", blur.sinc_cutoff, 0.01, 1, "units of pi")
        span(f"{name}.blur.sinc_cutoff_small", blur.sinc_cutoff_small, 0.01, 1, "units of pi")
        resize = stage.resize
        sums_to_one(f"{name}.resize", {"up": resize.up, "down": resize.down, "keep": resize.keep})
        need(len(resize.range) == 2, f"{name}.resize.range", "[min, max] (a factor)", resize.range)
        need(
            0.01 <= resize.range[0] <= 1 <= resize.range[1] <= 4,  # 4: bounds the memory of a 2048 px crop
            f"{name}.resize.range",
            "[min, max] with 0.01 <= min <= 1 <= max <= 4 (down to min, up to max)",
            resize.range,
        )
        modes(f"{name}.resize.modes", resize.modes)
        noise = stage.noise
        probability(f"{name}.noise.gaussian_prob", noise.gaussian_prob)
        span(f"{name}.noise.gaussian_sigma", noise.gaussian_sigma, 0, 255, "on 0..255")
        span(f"{name}.noise.poisson_scale", noise.poisson_scale, 0, 100, "a factor")
        probability(f"{name}.noise.gray_prob", noise.gray_prob)
        span(f"{name}.jpeg_quality", stage.jpeg_quality, 1, 100, "Pillow's JPEG quality")
    final = r.final
    probability("final.sinc_prob", final.sinc_prob)
    span("final.sinc_cutoff", final.sinc_cutoff, 0.01, 1, "units of pi")
    probability("final.sinc_first_prob", final.sinc_first_prob)
    modes("final.modes", final.modes)
