"""Where and in which precision the networks run: `auto` resolved once, the
same rules for training and upscaling."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from srgan.files.errors import SrganError

M = TypeVar("M", bound=torch.nn.Module)

ONEDNN_NO_MEMORY = "could not create a primitive"  # the whole message, as torch's oneDNN glue raises it
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}  # each precision's compute type


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    precision: str  # fp32, bf16 or fp16, never auto
    # NHWC activations: oneDNN's and cuDNN's fast convolution layout
    # (docs/performance.md measures the step with and without).
    channels_last: bool = True
    # precision auto, not yet timed (models/precision_choice.py): `precision`
    # says fp32 until for_training or for_inference chooses.
    measure: bool = False
    chosen: str = field(default="", compare=False)  # how auto chose, for describe()

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def place(self, module: M) -> M:
        """Move a network to the device, in the memory format."""
        # Module.to takes a device and a memory_format at once; torch's stubs list them apart.
        return module.to(self.device, memory_format=self.memory_format)  # type: ignore[call-overload]

    def tensor(self, x: torch.Tensor) -> torch.Tensor:
        """Move an NCHW batch to the device, in the memory format."""
        return x.to(self.device, non_blocking=True, memory_format=self.memory_format)

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for the forward passes; a no-op in fp32."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.precision])

    def describe(self) -> str:
        if self.device.type == "cuda":
            where = f"cuda ({torch.cuda.get_device_name(self.device)})"
        else:
            where = f"cpu ({torch.get_num_threads()} threads)"
        layout = "channels_last" if self.channels_last else "NCHW"
        return f"device {where}, {self.chosen or 'precision ' + self.precision}, {layout}"


def resolve_runtime(
    device: str = "auto",
    precision: str = "auto",
    channels_last: bool = True,
    keys: tuple[str, str] = ("--device", "--precision"),
) -> Runtime:
    """`device` auto: CUDA when available. `precision` auto: fp32 with
    `measure` set, for models/precision_choice.py to time the work in each
    precision once it is known (for_training, for_inference). fp16 is CUDA
    only (CPU fp16 is slow and lossy).
    `keys` name the option or config key each came from, for the refusals.
    Returns the Runtime; raises SrganError for a CUDA device this machine
    lacks, fp16 off CUDA, and bf16 on a GPU without it."""
    device_key, precision_key = keys
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SrganError(f"{device_key} {device}: no CUDA device is available (use auto or cpu)")
    if device.startswith("cuda:") and int(device[5:]) >= torch.cuda.device_count():
        raise SrganError(
            f"{device_key} {device}: this machine has {torch.cuda.device_count()} CUDA devices (0 to "
            f"{torch.cuda.device_count() - 1})"
        )
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen = torch.device(device)
    if precision == "fp16" and chosen.type != "cuda":
        raise SrganError(f"{precision_key} fp16: needs a CUDA device (use auto, fp32 or bf16 on the CPU)")
    if precision == "bf16" and chosen.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SrganError(f"{precision_key} bf16: this GPU does not support bf16 (use fp16 or fp32)")
    if precision == "auto":
        return Runtime(chosen, "fp32", channels_last, measure=True)
    return Runtime(chosen, precision, channels_last)


def fast_bf16(device: torch.device) -> bool:
    """Whether bf16 matrix work is fast here (not merely emulated), by the
    device's flags: auto's rule before it was measured, which a resumed run
    that recorded no choice keeps."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return cpu_has_bf16_units()


def cpu_has_bf16_units() -> bool:
    """AMX tiles or AVX512-BF16 instructions, which oneDNN uses for bf16 convolutions."""
    cpu = getattr(torch, "cpu", None)
    for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):
        check = getattr(cpu, probe, None)
        if check is not None and check():
            return True
    try:  # older torch without the probes: read the kernel's flags
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def is_out_of_memory(error: BaseException) -> bool:
    """A failed allocation: Python's MemoryError, CUDA's, torch's CPU
    allocator's (a RuntimeError of its own), or oneDNN's failure to build a
    kernel for a new shape, which is how its own allocations fail under an
    address-space limit (not "... primitive descriptor ...": an unsupported
    configuration)."""
    if isinstance(error, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "can't allocate memory" in text or "DefaultCPUAllocator" in text or text.strip() == ONEDNN_NO_MEMORY
    )


def set_deterministic(enabled: bool) -> None:
    """Deterministic kernels only (`train.deterministic`), or the fastest.
    Process-wide, as PyTorch's switches are; cuBLAS reads its workspace
    setting when it starts, which is after this in a run."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled)
    # Deterministic mode also fills every new tensor with NaN (a debugging
    # aid against reads of uninitialised memory): thousands of fills a step,
    # for outputs every kernel writes whole anyway.
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    torch.backends.cudnn.deterministic = enabled
    torch.backends.cudnn.benchmark = not enabled  # autotuning picks kernels by timing: not repeatable
    if hasattr(torch.backends.mkldnn, "deterministic"):
        # a ContextProp, which the module's class makes assignable; torch's stubs do not say so
        torch.backends.mkldnn.deterministic = enabled  # type: ignore[assignment]
