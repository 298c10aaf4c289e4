"""`srgan export`: how a generator leaves the project, one function per
format (the target's extension picks it):

    .onnx          the eval-mode network (BatchNorm folded), input "input" N x 3 x H x W
                   float32 RGB in [0, 1], output "output" the same at the model's scale,
                   clamped to [0, 1] as `srgan upscale` clamps; height and width dynamic, the
                   batch too (1 for the windowed transformers: onnx_bytes says why)
    .safetensors   the generator's weights, with metadata srgan_model / arch / scale
                   (srgan_model for srgan's own architectures only)
    .pth           BasicSR's {"params_ema": state dict}, for rrdb and compact (the
                   architectures BasicSR has) and the networks spandrel reads

A network spandrel loaded (SPAN, SwinIR, ...) leaves with its own parameter
names, as it came. Every file is read back before it takes its name: its
bytes go to the temporary file the atomic write renames, and what users run
reads that file: onnxruntime runs the graph on an odd size and a second one,
and srgan's own loader (load_generator, as `srgan upscale -k` reads a file)
reads the weight files; each output is compared with srgan's fp32 output of
the source. export_generator refuses a file that would compute something
else, or that srgan cannot read, and never writes it (srgan.files)."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from srgan.configs import config_from_dict, config_to_dict
from srgan.files import check_output, write_file
from srgan.files.errors import SrganError, first_line
from srgan.inference.fused import fuse_for_inference, merge_span_blocks
from srgan.models import Generator, SRGenerator
from srgan.models.checkpoint import check_finite, load_generator
from srgan.models.rrdb import RRDBNet
from srgan.models.spandrel_generator import SpandrelGenerator

FORMATS = (".onnx", ".safetensors", ".pth")
DEFAULT_OPSET = 18  # the opset torch's dynamo exporter writes natively (onnxscript's torchlib)
# Those tested here; below 18 the exporter converts versions, and where it cannot (Pad
# for 17) it keeps 18 with a warning.
OPSETS = range(18, 24)
# The largest |difference| from srgan's fp32 output, on outputs in [0, 1], a file may
# show. An fp32 graph differs by rounding alone, far below 1e-4 (a fortieth of an
# 8-bit level); fp16 keeps 11 bits, and 1e-2 is two and a half 8-bit levels. The
# differences of the presets' networks: docs/export.md. fp32 weight files give exactly
# srgan's output.
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}
# The checks' inputs: an odd size (no side a multiple of 2 or 4: rrdb x1 and x2 pad
# it), then another batch and size (sides multiples of 4: no padding), which proves
# the dynamic axes. The exporter traces a third shape, so neither is the traced one.
CHECK_SHAPES = ((1, 3, 37, 23), (2, 3, 24, 32))
TRACE_SHAPE = (2, 3, 29, 19)  # batch 2: a traced batch of 1 would be fixed at 1


@dataclass(frozen=True)
class ExportReport:
    path: Path
    format: str  # onnx, safetensors or pth
    arch: str
    scale: int
    precision: str  # fp32 or fp16 (the weights, and for onnx the compute)
    max_abs_diff: float  # against srgan's fp32 output, over CHECK_SHAPES
    tolerance: float
    opset: int | None = None  # onnx only
    checked: tuple[tuple[int, ...], ...] = CHECK_SHAPES  # the input shapes the file was run on
    batch: int | None = None  # the one batch an .onnx graph takes (None: any)


def export_format(path: Path) -> str:
    """The format `path`'s extension names, without the dot; raises SrganError for any other extension."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise SrganError(f"{path}: unknown export format {suffix or '(no extension)'!r}; expected {'/'.join(FORMATS)}")
    return suffix[1:]


def export_generator(
    generator: SRGenerator,
    path: Path,
    fp16: bool = False,
    opset: int | None = None,
    overwrite: bool = False,
    inputs: tuple[Path, ...] = (),
    source: str | Path = "the generator",
) -> ExportReport:
    """Write `generator` (read from `source`, which refusals about the network
    name) to `path` in the format its extension names, read back and checked
    before it takes its name (see the module's docstring), and return the
    report. Raises SrganError, writing nothing, for an unknown extension, an
    --opset srgan does not support or that is not for .onnx, an existing
    `path` without `overwrite`, and a file that fails its check."""
    kind = export_format(path)
    if opset is not None and kind != "onnx":
        raise SrganError(f"--opset: applies to .onnx only, not .{kind}")
    if opset is not None and opset not in OPSETS:
        raise SrganError(f"--opset: expected {OPSETS.start} to {OPSETS.stop - 1}, got {opset}")
    check_output(path, overwrite, inputs)  # before the slow part
    if (
        kind == "onnx"
        and fp16
        and isinstance(generator, SpandrelGenerator)
        and not generator.low_precision[torch.float16]
    ):
        raise SrganError(
            f"{source}: {generator.describe()}: spandrel runs this architecture in fp32 only (its fp16 output "
            "is not trusted), so no --fp16 ONNX of it; export without --fp16"
        )
    generator = generator.eval().float().cpu()
    precision = "fp16" if fp16 else "fp32"
    batch = None
    if kind == "onnx":
        opset = opset or DEFAULT_OPSET
        data = onnx_bytes(generator, fp16, opset, source)
        batch = graph_batch(data)
        check = check_onnx
    elif kind == "safetensors":
        data = safetensors_bytes(generator, fp16)
        check = check_weight_file
    else:
        data = basicsr_pth_bytes(generator, fp16, path)
        check = check_weight_file
    diffs = []

    def write_and_check(file) -> None:
        file.write(data)
        file.flush()
        diffs.append(check(Path(file.name), generator, precision, path))  # the temporary, under its final bytes

    write_file(path, write_and_check, overwrite=overwrite, inputs=inputs)
    return ExportReport(
        Path(path),
        kind,
        generator.arch,
        generator.scale,
        precision,
        diffs[0],
        TOLERANCE[precision],
        opset,
        checked_shapes(batch),
        batch,
    )


def model_section(generator: SRGenerator) -> dict[str, Any]:
    """The generator's resolved `model` config section, as a checkpoint's
    config["model"] holds it: what build_generator needs to rebuild it (from
    the network itself, so any file load_generator reads has one). icnr only
    changes the initial weights and is written false; init_from is null."""
    values: dict[str, Any] = {
        "arch": generator.arch,
        "scale": generator.scale,
        "blocks": generator.blocks,
        "channels": generator.channels,
    }
    if isinstance(generator, Generator):
        first = generator.body[0] if len(generator.body) else None
        res_scale = getattr(first, "res_scale", 1.0)
        values |= {"norm": generator.norm, "residual": generator.residual, "res_scale": res_scale}
    elif isinstance(generator, RRDBNet):
        values["growth"] = generator.growth
    return config_to_dict(config_from_dict({"model": values}, "the exported generator"))["model"]


# ---- the check input and srgan's own output ------------------------------------------


def check_input(shape: tuple[int, ...]) -> torch.Tensor:
    """A deterministic photo-like input in [0, 1]: smooth colour gradients
    with fine texture (random weights on plain noise put most outputs at the
    clamp, where every file agrees)."""
    batch, channels, height, width = shape
    y = torch.linspace(0, 1, height).view(1, 1, height, 1)
    x = torch.linspace(0, 1, width).view(1, 1, 1, width)
    phase = torch.arange(batch * channels, dtype=torch.float32).view(batch, channels, 1, 1)
    texture = torch.rand(shape, generator=torch.Generator().manual_seed(0))
    return (0.35 + 0.25 * torch.sin(6 * x + 4 * y + phase) + 0.2 * texture).clamp(0, 1)


def srgan_output(generator: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What `srgan upscale` computes before quantising: the fp32 eval-mode
    network, clamped to [0, 1]."""
    with torch.no_grad():
        return generator.eval()(x).float().clamp(0, 1)


def refuse_above(diff: float, precision: str, path: Path, what: str) -> float:
    if not diff <= TOLERANCE[precision]:  # NaN fails too
        raise SrganError(
            f"{path}: not written: {what} differs from srgan's fp32 output by up to {diff:.2e}, "
            f"above the {precision} tolerance {TOLERANCE[precision]:.0e}"
        )
    return diff


# ---- .onnx --------------------------------------------------------------------------


class OnnxNetwork(nn.Module):
    """What the ONNX graph computes: float32 in, the network in fp32 or fp16,
    float32 out, clamped to [0, 1]. The input and output stay float32 in
    both: chaiNNer reads the input's type and feeds either, and one script
    then runs both files."""

    def __init__(self, network: nn.Module, fp16: bool):
        super().__init__()
        self.dtype = torch.float16 if fp16 else torch.float32
        self.network = network.to(self.dtype)
        # spandrel's descriptor pads with Python ints, which the tracer fixes
        # at the traced size: the graph pads itself, from the input's shape.
        self.rule = None
        if isinstance(network, SpandrelGenerator):
            need = network.descriptor.size_requirements
            if need.multiple_of > 1 or need.minimum > 0 or need.square:
                self.rule, self.network = need, network.network.to(self.dtype)
                self.scale = network.scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rule is None:
            return self.network(x.to(self.dtype)).float().clamp(0, 1)
        height, width = x.shape[-2:]
        out = self.network(pad_to_rule(x, self.rule).to(self.dtype))
        return out[..., : height * self.scale, : width * self.scale].float().clamp(0, 1)


def pad_to_rule(x: torch.Tensor, need: Any) -> torch.Tensor:
    """`x` padded on the bottom and right to the smallest size that meets
    spandrel's SizeRequirements `need`, as spandrel's descriptor pads (reflect,
    then replicate beyond what reflection reaches), in torch's symbolic
    integers so that an exported graph pads any size."""
    height, width = x.shape[-2:]

    def target(side: Any) -> Any:
        side = torch.sym_max(need.minimum, side)
        return (side + need.multiple_of - 1) // need.multiple_of * need.multiple_of

    new_height, new_width = target(height), target(width)
    if need.square:
        new_height = new_width = torch.sym_max(new_height, new_width)
    pad_h, pad_w = new_height - height, new_width - width
    reflect_h, reflect_w = torch.sym_min(pad_h, height - 1), torch.sym_min(pad_w, width - 1)
    x = nn.functional.pad(x, (0, reflect_w, 0, reflect_h), "reflect")
    return nn.functional.pad(x, (0, pad_w - reflect_w, 0, pad_h - reflect_h), "replicate")


def require_export_extra(what: str, modules: tuple[str, ...] = ("onnx", "onnxscript", "onnxruntime")) -> None:
    """Raise SrganError, naming the extra to install, when one of `modules` is missing."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            raise SrganError(f"{what} needs {name}, which is not installed: pip install 'srgan[export]'") from None


def onnx_bytes(generator: SRGenerator, fp16: bool, opset: int, source: str | Path = "the generator") -> bytes:
    """The ONNX graph of the generator's inference network, serialised.

    torch's dynamo exporter (torch.export, then onnxscript): the legacy
    TorchScript exporter cannot export SRResNet, whose tail weight is
    computed in forward(). Dim.AUTO rather than named dims: rrdb x1/x2's
    padding branches on the side's remainder, which named dims refuse; the
    axes AUTO leaves dynamic are checked below, and check_onnx runs two sizes.

    The batch stays dynamic where the graph runs another batch than the
    traced one. spandrel's windowed transformers (SwinIR, DAT, HAT, ...)
    compute their batch in the window reverse as int(windows / (H * W /
    window**2)), a float, which torch.export replaces by the traced batch:
    their graph is traced again at batch 1 (one image a run, as chaiNNer
    feeds it), height and width dynamic, and says so in its input shape.

    torch.export runs here, non-strict, and its program goes to the ONNX
    exporter: given the network itself, torch.onnx.export falls back on a
    failure to its strict (dynamo) tracer, whose decompositions crash the
    process on a network that assigns its parameters' .data in forward
    (SPAN's Conv3XC, which fuse_for_inference folds). Raises SrganError when
    the export extra is missing, when torch.export cannot trace the network,
    and when the exporter writes another opset."""
    require_export_extra("export to .onnx")
    network = OnnxNetwork(fuse_for_inference(generator), fp16).eval()
    with quiet_exporter():
        exported = traced_program(network, TRACE_SHAPE, generator, source)
        if not runs_batch(exported, (1, *TRACE_SHAPE[1:])):
            exported = traced_program(network, (1, *TRACE_SHAPE[1:]), generator, source)
        try:
            program = torch.onnx.export(
                exported,
                input_names=["input"],
                output_names=["output"],
                opset_version=opset,
                dynamo=True,
                verbose=False,
            )
        except Exception as error:  # traced, but an op the ONNX converter has no function for (ATD's)
            cause = error.__cause__ or error
            detail = first_line(cause)
            detail = detail if detail.startswith(type(cause).__name__) else f"{type(cause).__name__}: {detail}"
            raise SrganError(
                f"{source}: {describe_network(generator)} cannot be exported to ONNX: torch {torch.__version__}'s "
                f"converter fails on its traced program ({detail})"
            ) from None
    assert program is not None  # the dynamo exporter returns its program
    model = program.model_proto
    written = {entry.domain: entry.version for entry in model.opset_import}.get("", None)
    if written != opset:  # the exporter converts down (or not) on its own, with a warning at most
        raise SrganError(f"--opset {opset}: torch's exporter wrote opset {written} instead")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for axis in (0, 2, 3) if exported.example_inputs[0][0].shape[0] > 1 else (2, 3):
        if dims[axis].dim_param == "":
            raise RuntimeError(f"the exporter fixed the input's axis {axis}: the graph would take one size only")
    strip_trace_metadata(model)
    for key, value in weights_metadata(generator).items():
        model.metadata_props.add(key=key, value=value)
    return model.SerializeToString()


def traced_program(network: nn.Module, shape: tuple[int, ...], generator: SRGenerator, source: str | Path):
    """torch.export's program of `network` traced on a `shape` input, its
    height and width dynamic, and its batch too when `shape`'s is above 1."""
    auto = torch.export.Dim.AUTO
    axes = (0, 2, 3) if shape[0] > 1 else (2, 3)
    try:
        return torch.export.export(
            network, (check_input(shape),), dynamic_shapes={"x": dict.fromkeys(axes, auto)}, strict=False
        )
    except Exception as error:  # an op or a Python construct the tracer does not take
        raise SrganError(
            f"{source}: {describe_network(generator)} cannot be exported to ONNX: torch.export "
            f"{torch.__version__} cannot trace it ({type(error).__name__}: {first_line(error)})"
        ) from None


def runs_batch(exported, shape: tuple[int, ...]) -> bool:
    """Whether the exported program runs a `shape` input: its guards fail
    where the trace fixed a size that `shape` changes."""
    try:
        with torch.no_grad():
            exported.module()(check_input(shape))
    except Exception:  # torch.export's guard: a size the trace fixed
        return False
    return True


def graph_batch(data: bytes) -> int | None:
    """The batch a serialised ONNX graph takes: None when any, else the one it was traced at."""
    import onnx  # the export extra, checked by onnx_bytes

    dim = onnx.load_from_string(data).graph.input[0].type.tensor_type.shape.dim[0]
    return None if dim.dim_param else dim.dim_value


def checked_shapes(batch: int | None) -> tuple[tuple[int, ...], ...]:
    """CHECK_SHAPES, at `batch` where the graph takes only that one."""
    return CHECK_SHAPES if batch is None else tuple((batch, *shape[1:]) for shape in CHECK_SHAPES)


def strip_trace_metadata(model) -> None:
    """The exporter annotates every node and value with its Python stack
    trace and FX names: the exporting machine's paths, in a file meant to be
    shared. The graph does not need them."""
    graph = model.graph
    for item in (*graph.node, *graph.value_info, *graph.input, *graph.output, *graph.initializer):
        del item.metadata_props[:]
    for function in model.functions:
        for node in function.node:
            del node.metadata_props[:]


@contextlib.contextmanager
def quiet_exporter():
    """Silence the exporter's progress lines and its warnings about specialised
    dims (onnx_bytes checks those itself): they are not for the user."""
    loggers = [logging.getLogger(name) for name in ("torch.export", "torch._export", "torch.onnx", "torch._dynamo")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def describe_network(generator: SRGenerator) -> str:
    if isinstance(generator, SpandrelGenerator):
        return generator.describe()
    return f"{generator.arch} x{generator.scale}"


def onnx_session(model: bytes | str, threads: int | None = None):
    """An onnxruntime CPU session (the `export` extra's onnxruntime)."""
    import onnxruntime  # the export extra's, checked by require_export_extra before any session

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: its warnings about unused initialisers are noise
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def check_onnx(written: Path, generator: SRGenerator, precision: str, path: Path) -> float:
    """Run the written graph in onnxruntime on CHECK_SHAPES (at the graph's
    batch where it takes one only) and return the
    largest difference from srgan's fp32 output. Raises SrganError when
    onnxruntime cannot run a shape, or the difference is above the tolerance."""
    session = onnx_session(str(written))
    diff = 0.0
    for shape in checked_shapes(graph_batch(written.read_bytes())):
        x = check_input(shape)
        try:
            (got,) = session.run(["output"], {"input": x.numpy()})
        except Exception as error:  # onnxruntime's Fail: a size the exporter fixed from the traced one
            raise SrganError(
                f"{path}: not written: onnxruntime cannot run the exported {describe_network(generator)} on "
                f"{'x'.join(map(str, shape))} ({first_line(error)}); the exporter fixed a size this network "
                "computes from its input"
            ) from None
        expected = srgan_output(generator, x)
        if tuple(got.shape) != tuple(expected.shape):
            raise RuntimeError(f"onnxruntime gave {got.shape} for {shape}, srgan {tuple(expected.shape)}")
        diff = max(diff, float((torch.from_numpy(got) - expected).abs().max()))
    return refuse_above(diff, precision, path, "onnxruntime's output")


# ---- .safetensors and .pth ------------------------------------------------------------


def weights_metadata(generator: SRGenerator) -> dict[str, str]:
    """What a reader needs to rebuild the network (models/checkpoint.py reads it back):
    srgan_model, the JSON of the resolved model section; arch; scale. A network
    spandrel loaded has no model section (spandrel reads its shapes from the
    weights, as srgan's loader then does): arch (spandrel's id) and scale only."""
    named = {"arch": generator.arch, "scale": str(generator.scale)}
    if isinstance(generator, SpandrelGenerator):
        return named
    return {"srgan_model": json.dumps(model_section(generator)), **named}


def export_state_dict(generator: SRGenerator, fp16: bool) -> dict[str, torch.Tensor]:
    """The weights as separate contiguous tensors, under the names the
    network's own implementation gives them (a spandrel network's, without
    srgan's wrapper, SPAN's eval convolutions merged from its trained
    branches); floating ones halved for --fp16."""
    network = generator.network if isinstance(generator, SpandrelGenerator) else generator
    merge_span_blocks(network)  # what its eval forward computes first, so the file holds the trained eval form
    state = {}
    for name, tensor in network.state_dict().items():
        tensor = tensor.detach().cpu()
        if fp16 and tensor.is_floating_point():
            tensor = tensor.half()
        state[name] = tensor.contiguous().clone()
    return state


def safetensors_bytes(generator: SRGenerator, fp16: bool) -> bytes:
    """The weights and weights_metadata as a .safetensors file's bytes. Raises
    SrganError without the safetensors package, and for non-finite weights."""
    try:
        from safetensors.torch import save
    except ImportError:
        raise SrganError("export to .safetensors needs safetensors: pip install 'srgan[interop]'") from None
    state = export_state_dict(generator, fp16)
    check_finite(state, "the generator")
    return save(state, metadata=weights_metadata(generator))


def basicsr_pth_bytes(generator: SRGenerator, fp16: bool, path: Path) -> bytes:
    """BasicSR's {"params_ema": state dict}: what BasicSR, traiNNer-redux and
    Real-ESRGAN save, and what spandrel and srgan unwrap, as bytes. Raises
    SrganError for an srresnet generator, which BasicSR has no form of, and
    for non-finite weights."""
    if isinstance(generator, Generator):
        raise SrganError(
            f"{path}: BasicSR has no SRGAN SRResNet (its MSRResNet is another network), so no "
            "BasicSR .pth of an srresnet model exists; export to .safetensors or .onnx"
        )

    state = export_state_dict(generator, fp16)
    check_finite(state, "the generator")
    buffer = io.BytesIO()
    torch.save({"params_ema": state}, buffer)
    return buffer.getvalue()


def check_weight_file(written: Path, generator: SRGenerator, precision: str, path: Path) -> float:
    """Read the written file with srgan's own loader, as `srgan upscale -k`
    does (an srgan .safetensors rebuilt from its metadata alone, a BasicSR
    .pth recognised by its keys and shapes, any other network through
    spandrel), compare its output with the source's, and return the largest
    difference. Raises SrganError for a file srgan cannot read, reads as
    another network, or reads with outputs above the tolerance."""

    try:
        rebuilt = load_generator(written)
    except SrganError as error:
        reason = first_line(error).replace(f"{written}: ", "")
        raise SrganError(f"{path}: not written: srgan cannot read it back ({reason})") from None
    if (rebuilt.arch, rebuilt.scale) != (generator.arch, generator.scale):
        raise SrganError(
            f"{path}: not written: srgan reads it back as {rebuilt.arch} x{rebuilt.scale}, "
            f"not {generator.arch} x{generator.scale}"
        )
    return compare_networks(rebuilt.eval(), generator, precision, path)


def compare_networks(rebuilt: nn.Module, generator: SRGenerator, precision: str, path: Path) -> float:
    diff = 0.0
    for shape in CHECK_SHAPES:
        x = check_input(shape)
        diff = max(diff, float((srgan_output(rebuilt, x) - srgan_output(generator, x)).abs().max()))
    return refuse_above(diff, precision, path, "the network read back from it")
