"""What several commands share: help texts and the --device/--precision options."""

from __future__ import annotations

from srgan.files.errors import SrganError

CONFIG_HELP = "A preset name (see `srgan config list`) or a YAML file."
SET_HELP = (
    "Override one key, e.g. --set train.epochs=5 (repeatable; values are YAML; "
    "a mapping given to a section is merged into it key by key)."
)
DEVICE_HELP = "auto (CUDA when available), cpu, cuda or cuda:K."
CHECKPOINT_HELP = (
    "An srgan checkpoint file or run folder, or a community generator file (.pth, .pt or .safetensors): "
    "BasicSR/Real-ESRGAN RRDBNet or SRVGGNetCompact, ESRGAN's 2018 RRDB layout, leftthomas/SRGAN's netG, "
    "or any other architecture spandrel recognises (SwinIR, HAT, DAT, SPAN, ...; docs/models.md)."
)
PRECISION_HELP = (
    "auto (fp32 or bf16, whichever runs the network faster here: timed once per machine and cached), "
    "fp32, bf16 or fp16 (CUDA only)."
)


def runtime_from_options(device: str, precision: str):
    """The runtime that --device and --precision resolve to (this imports torch);
    SrganError for a device or a precision srgan does not know."""
    from srgan.configs.checks import DEVICES, is_device  # srgan.configs imports yaml, which --help does not need

    if not is_device(device):
        raise SrganError(f"--device: expected {DEVICES}, got {device!r}")
    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise SrganError(f"--precision: expected auto, fp32, bf16 or fp16, got {precision!r}")
    from srgan.models import resolve_runtime  # torch loads here, not at start-up: srgan --help stays fast

    return resolve_runtime(device, precision)


BLEND_HELP = (
    "A second generator of the --checkpoint's architecture and shape (any file --checkpoint takes), blended "
    "with it weight by weight before the work, as `srgan interpolate` blends (docs/interpolate.md)."
)
BLEND_ALPHA_HELP = "With --blend: (1 - a) * checkpoint + a * blend; 0 is the --checkpoint, 1 the --blend; 0 to 1."


def generator_from_option(checkpoint, runtime, say_precision=True, blend=None, blend_alpha=None):
    """The generator of a --checkpoint (an srgan checkpoint file or run folder,
    or a community model file: docs/models.md), on the runtime's device, the
    description of the model it recognised (the command prints it once its
    own checks pass), and the runtime to run it in: --precision auto timed
    on this network (measured_runtime), said at the end of the description
    with `say_precision` (upscale's own line says it), so that the command's
    first line stays the model's and a refused input stays one line. With a
    --blend file, the two generators blended at `blend_alpha` (default 0.5;
    models/interpolate.py). SrganError for a file it cannot load, a
    --blend-alpha without --blend or outside [0, 1], and a --blend of
    another architecture or shape."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.models.checkpoint import load_described_generator

    if blend is None:
        if blend_alpha is not None:
            raise SrganError("--blend-alpha: applies with --blend only (the generator to blend with)")
        generator, model = load_described_generator(checkpoint)
    else:
        from srgan.models.interpolate import check_alpha, load_blended_generator

        alpha = check_alpha(0.5 if blend_alpha is None else blend_alpha, "--blend-alpha")
        generator, model = load_blended_generator(checkpoint, blend, alpha)
    generator = runtime.place(generator)
    measured = measured_runtime(generator, runtime)
    if say_precision and measured.chosen:
        model = f"{model}; {measured.chosen}"
    return generator, model, measured


def measured_runtime(generator, runtime):
    """`runtime`, its precision chosen by timing `generator` (on its device)
    when --precision is auto (models/precision_choice.py)."""
    from srgan.models.precision_choice import for_inference

    return for_inference(runtime, generator)
