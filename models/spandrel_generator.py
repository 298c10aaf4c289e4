"""A network of spandrel's (chaiNNer's loader): one it recognised in a
community file (SwinIR, HAT, DAT, SPAN, OmniSR, ...), or one srgan trains
(models/spandrel_archs.py builds spandrel's class from the config). upscale,
evaluate, compare and video run it with srgan's tiling, alpha, 16-bit,
memory budget and precision; training calls the network itself.

spandrel's descriptor does what such a network needs around its forward
pass: it pads the input to the sizes the network takes (a multiple of its
window, a square, a minimum) and cuts the padding's output off again, and
calls networks that want more than an image the way they want. A network
whose descriptor says it cannot run in bf16 or fp16 runs in fp32 instead."""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from srgan.files.errors import SrganError, first_line

if TYPE_CHECKING:
    from srgan.configs.schema import Config


class SpandrelGenerator(nn.Module):
    """A spandrel ImageModelDescriptor with what srgan's inference reads from
    a generator: scale, arch, channels (for the memory estimate), tile_align,
    receptive_radius (None: attention over shifted windows makes the reach
    grow with depth, so inference/tile_pad.py measures the pad tiles need;
    SAFMN's is counted) and probe_misses_reach."""

    def __init__(self, descriptor: Any, min_batch: int = 1):
        super().__init__()
        self.network = descriptor.model  # a submodule: .to(), .eval() and deepcopy reach it
        self.descriptor = descriptor  # pads, calls and crops around self.network
        self.arch = descriptor.architecture.id
        self.scale = descriptor.scale
        self.blocks = 0  # not a notion every architecture has
        # The widest layer, for the tiles' activation estimate (inference/tiles.py).
        self.channels = max((p.shape[0] for p in self.network.parameters() if p.ndim >= 2), default=64)
        self.tile_align = math.lcm(descriptor.size_requirements.multiple_of, window_grid(self.network))
        self.receptive_radius: int | None = safmn_radius(self.network) if self.arch == "SAFMN" else None
        # Max pooling: a pixel beyond a tile's context changes a window's maximum only
        # where it is the largest, which the tile-pad probe's image rarely makes it
        # (docs/tiling.md): such a network's tiles read its whole receptive radius.
        self.probe_misses_reach = self.arch == "SAFMN"
        self.min_batch = min_batch  # the smallest micro-batch its training forward runs (models/spandrel_archs.py)
        self.low_precision = {torch.bfloat16: descriptor.supports_bfloat16, torch.float16: descriptor.supports_half}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device) and not self.low_precision.get(torch.get_autocast_dtype(device), True):
            with torch.autocast(device, enabled=False):
                return self.run(x.float())
        return self.run(x)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        # Training calls the network itself: the descriptor runs it in eval
        # mode under inference_mode (no gradient) and clamps in place. The
        # training crops already meet its size rule (check_crop, below).
        if self.training:
            return self.network(x)
        return self.descriptor(x)

    def describe(self) -> str:
        d = self.descriptor
        text = f"{d.architecture.name} (through spandrel), x{d.scale}"
        if d.tags:
            text += f", {' '.join(d.tags)}"
        if not d.supports_bfloat16:
            text += ", runs in fp32 (no bf16)"
        return text


def safmn_radius(network: nn.Module) -> int:
    """SAFMN's receptive radius in LR pixels: its 3x3 head and tail, and per
    block a SAFM, whose coarsest level max-pools 2^(levels-1) px cells and
    convolves them 3x3 (a pixel reads its cell and one more on each side:
    up to 3 cells less one pixel away), and the CCM's 3x3 convolution."""
    blocks = list(network.feats)  # type: ignore[arg-type]
    cell = 2 ** (blocks[0].safm.n_levels - 1) if blocks else 1
    return 2 + len(blocks) * (3 * cell - 1 + 1)


def window_grid(network: nn.Module) -> int:
    """The grid a window transformer's attention windows lie on (the lcm of
    its layers' window_size and split_size, 1 for none). The windows start
    at the input's top-left corner: a tile whose context starts off that
    grid groups its pixels into other windows than the whole image does,
    and differs from it everywhere, not only at its edges."""
    grid = 1
    for module in network.modules():
        for name in ("window_size", "split_size"):
            value = getattr(module, name, None)
            sides = [value] if isinstance(value, int) else list(value) if isinstance(value, (list, tuple)) else []
            for side in sides:
                if isinstance(side, int) and side > 0:
                    grid = math.lcm(grid, side)
    return grid


def check_crop(config: Config, generator: SpandrelGenerator) -> None:
    """Raises SrganError for a training crop whose LR side breaks the
    network's size rule (a window transformer's multiple), naming the
    nearest crop that keeps it, and for a micro-batch smaller than the
    network trains on."""
    micro_batch = config.data.batch_size // config.train.accumulate
    if micro_batch < generator.min_batch:
        raise SrganError(
            f"data.batch_size: {config.model.arch} trains on micro-batches of at least {generator.min_batch} "
            f"(data.batch_size / train.accumulate = {config.data.batch_size} / {config.train.accumulate} = "
            f"{micro_batch}): its BatchNorm normalises pooled features over the batch"
        )
    need = generator.descriptor.size_requirements
    lr_side = config.data.crop_size // config.model.scale
    if lr_side % need.multiple_of == 0 and lr_side >= need.minimum:
        return
    step = need.multiple_of
    nearest = max(need.minimum, step * max(1, round(lr_side / step))) * config.model.scale
    rule = " and ".join(
        ([f"multiples of {step}"] if step > 1 else []) + ([f"at least {need.minimum}"] if need.minimum else [])
    )
    raise SrganError(
        f"data.crop_size: {config.model.arch} trains on LR sides {rule} (data.crop_size / model.scale = "
        f"{config.data.crop_size} / {config.model.scale} = {lr_side}); the nearest crop that fits: {nearest}"
    )


def spandrel_generator(state: dict[str, torch.Tensor], origin: str, why: str) -> SpandrelGenerator:
    """The network spandrel recognises in `state`; `why` is srgan's own
    refusal, kept when spandrel knows the keys no better. Raises SrganError
    when spandrel is missing, does not recognise or cannot load `state`,
    would build a network far larger than the file, or builds one that is
    not one RGB image in and one out."""
    try:
        import spandrel
    except ImportError:
        raise SrganError(f"{why}; spandrel would run other architectures: pip install 'srgan[interop]'") from None
    stored = sum(t.numel() for t in state.values())
    budget = BuildBudget(2 * stored + BUILD_SLACK)
    try:
        with warnings.catch_warnings(), budget:  # its architectures' deprecation notices: not the user's business
            warnings.simplefilter("ignore")
            descriptor = spandrel.ModelLoader().load_from_state_dict(state)
    except OverBudget as error:
        raise SrganError(
            f"{origin}: spandrel would build a network of more than {budget.limit:,} numbers ({error}) from a "
            f"file of {stored:,}: its shapes disagree (a damaged or forged file)"
        ) from None
    except spandrel.UnsupportedModelError:
        raise SrganError(f"{why}; nor does spandrel {spandrel.__version__} recognise it") from None
    except Exception as error:  # a layout it recognised, with tensors that do not fit it
        raise SrganError(f"{why}; nor can spandrel {spandrel.__version__} load it ({failure(error)})") from None
    network = descriptor.model.state_dict()
    for name, tensor in state.items():  # refuse a float weight stored as an integer, as for srgan's own networks
        if name in network and tensor.is_floating_point() != network[name].is_floating_point():
            raise SrganError(
                f"{origin}: {name} is {tensor.dtype}, the {descriptor.architecture.name} network's "
                f"is {network[name].dtype}"
            )
    if not isinstance(descriptor, spandrel.ImageModelDescriptor) or (
        descriptor.input_channels,
        descriptor.output_channels,
    ) != (3, 3):
        raise SrganError(
            f"{origin}: a {descriptor.architecture.name} network (spandrel), not one RGB image in and one out "
            "as srgan upscales"
        )
    return SpandrelGenerator(descriptor).eval()


# What a network built from a state dict may make beyond twice the file's own
# numbers (buffers it computes, temporaries), in elements: 32 MB of float32.
BUILD_SLACK = 1 << 23

# torch's functions that make a tensor, as torch_function sees them: a module's
# __init__ makes its parameters and buffers with these.
FACTORIES = frozenset(
    "empty empty_strided zeros ones full rand randn randint tensor arange linspace eye "
    "empty_like zeros_like ones_like full_like rand_like randn_like "
    "new_empty new_zeros new_ones new_full new_tensor".split()
)


class OverBudget(Exception):
    pass


class BuildBudget(TorchFunctionMode):
    """Counts the elements of the tensors made while spandrel builds a
    network, as each is made, and stops the build past `limit`. spandrel reads an
    architecture's widths from a few of the file's shapes and builds the whole
    network before it loads the file's tensors, so a small file declaring
    huge widths costs minutes and gigabytes before spandrel refuses it
    (tests/hostile/test_weight_files.py holds the case). A file whose
    network loads holds every one of its numbers, so twice the file's count
    and a slack bound every honest build. Counting a tensor when it is made
    is early enough: until its initialisation writes it, it costs only
    address space."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.total = limit, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor) and getattr(func, "__name__", None) in FACTORIES:
            self.total += result.numel()
            if self.total > self.limit:
                raise OverBudget(f"at a tensor of shape {list(result.shape)}")
        return result


def failure(error: Exception) -> str:
    """An exception's first line, and its second where the first only
    announces it (load_state_dict's "Error(s) in loading state_dict for X:"
    before the key and the shapes)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{error.__class__.__name__}: {lines[0]} {lines[1]}"
    return first_line(error)
