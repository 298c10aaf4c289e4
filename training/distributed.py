"""Many processes, one run: torchrun starts them, torch.distributed connects
them, DistributedDataParallel keeps the networks in step. Everything the
training loop needs to know about ranks is here: which process it is, which
device it drives, how values are averaged, whether it writes files.

A plain `srgan train` is a world of one: every method below is then a no-op
or the identity, and no process group is made."""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from srgan.files.errors import SrganError

log = logging.getLogger("srgan")


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    _sync_reported: bool = False

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, which alone writes the run folder, the
        checkpoints, the pictures and the progress bar."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @classmethod
    def from_environment(cls, device: str, timeout_s: int) -> World:
        """Join the process group torchrun describes in the environment (RANK,
        WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), NCCL on CUDA, gloo on the
        CPU; a world of one without torchrun. Collectives time out after
        `timeout_s`, so a rank that dies cannot hang the others forever.
        Raises SrganError when LOCAL_RANK has no CUDA device or the group
        cannot be joined."""
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls()
        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if cuda:
            if local_rank >= torch.cuda.device_count():
                raise SrganError(
                    f"LOCAL_RANK {local_rank}: this machine has {torch.cuda.device_count()} CUDA "
                    "devices; start at most that many processes a node (torchrun --nproc_per_node)"
                )
            torch.cuda.set_device(local_rank)
        try:
            dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as error:
            raise SrganError(f"torch.distributed: cannot join the process group of {size} ranks ({error})") from None
        world = cls(rank, size, local_rank)
        if not world.is_main:
            logging.getLogger("srgan").setLevel(logging.WARNING)  # one voice: rank 0's
        return world

    def device(self, requested: str) -> str:
        """The device this rank drives: cuda:LOCAL_RANK under torchrun on CUDA."""
        if self.distributed and (requested.startswith("cuda") or (requested == "auto" and torch.cuda.is_available())):
            return f"cuda:{self.local_rank}"
        return requested

    def wrap(self, module: nn.Module, sync_bn: bool) -> nn.Module:
        """The module under DDP (its gradients averaged over the ranks in the
        backward), or itself in a world of one. Raises SrganError for
        `sync_bn` on the CPU.

        No buffer sync in the forward: by default DDP copies rank 0's BatchNorm
        statistics into every rank, in place, at the start of every forward.
        The discriminator runs forward up to three times a step (D(x) and
        D(G(z)) for its update, D(G(z)) again inside the generator's graph),
        and that in-place copy invalidates what autograd saved from the
        earlier forwards (pytorch/pytorch#175024). Each rank keeps its own
        running statistics instead (they only matter in eval mode) and
        `sync_buffers` averages them before they are used or saved."""
        if not self.distributed:
            return module
        if sync_bn and not next(module.parameters()).is_cuda:
            raise SrganError(
                "train.sync_bn: SyncBatchNorm needs CUDA; on the CPU every rank normalises its own "
                "share of the batch (set train.sync_bn: false)"
            )
        if sync_bn:
            module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
        device_ids = [self.local_rank] if next(module.parameters()).is_cuda else None
        # Newer PyTorch names the switch forward_sync_buffers (rank 0's buffers are still copied once, at the start).
        no_sync: dict[str, Any] = (
            {"forward_sync_buffers": False}
            if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
            else {"broadcast_buffers": False}
        )
        return DistributedDataParallel(module, device_ids=device_ids, **no_sync)

    def broadcast(self, value):
        """Rank 0's value (anything picklable), on every rank."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def run_on_main(self, action):
        """`action()` on rank 0 alone; its result, or its SrganError, reaches
        every rank (so a refusal on rank 0 stops them all, not just it)."""
        result, error = None, None
        if self.is_main:
            try:
                result = action()
            except SrganError as refused:
                error = refused
        result, message = self.broadcast((result, None if error is None else str(error)))
        if message is not None:  # the same words on every rank: the CLI prints them once (first_to_report)
            raise error if error is not None else SrganError(message)
        return result

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """The average over the ranks (one collective for the whole tensor)."""
        if not self.distributed:
            return values
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values / self.size

    def total(self, values: torch.Tensor) -> torch.Tensor:
        if not self.distributed:
            return values
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values

    def maximum(self, value: float, device: torch.device) -> float:
        """The largest of the ranks' values (a signal seen by some ranks stops them all)."""
        return self._reduced(value, device, dist.ReduceOp.MAX)

    def minimum(self, value: float, device: torch.device) -> float:
        """The smallest of the ranks' values (the micro-batch every rank can hold)."""
        return self._reduced(value, device, dist.ReduceOp.MIN)

    def _reduced(self, value: float, device: torch.device, op: Any) -> float:
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=op)
        return tensor.item()

    def sync_buffers(self, module: nn.Module) -> None:
        """Average the BatchNorm running statistics over the ranks (see wrap)."""
        if not self.distributed:
            return
        for buffer in unwrap(module).buffers():
            if buffer.is_floating_point():
                dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
                buffer.div_(self.size)
            else:  # num_batches_tracked: the same count on every rank
                dist.broadcast(buffer, src=0)

    def check_in_sync(self, modules: dict[str, nn.Module], device: torch.device) -> None:
        """Raise SrganError, naming the network, when the ranks' weights
        differ. DDP promises they match; a cheap checksum per network,
        compared at each checkpoint, catches a replica that drifted before
        its checkpoint is trusted."""
        if not self.distributed:
            return
        sums = torch.stack(
            [torch.stack([p.detach().double().sum() for p in unwrap(m).parameters()]).sum() for m in modules.values()]
        ).to(device)
        low, high = sums.clone(), sums.clone()
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        for name, a, b in zip(modules, low.tolist(), high.tolist(), strict=True):
            if a != b:
                raise SrganError(f"the {name}'s weights differ between ranks ({a!r} .. {b!r}); stopping")
        if not self._sync_reported:
            log.info("the %d ranks hold the same weights (checked at every checkpoint)", self.size)
            self._sync_reported = True

    def shard(self, count: int) -> range:
        """The indices of `count` items this rank takes (every size-th)."""
        return range(self.rank, count, self.size)

    def close(self) -> None:
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()


def first_to_report(message: str) -> bool:
    """Whether this process should print `message`. Under torchrun every rank
    usually meets the same error (a mistake in the config, a refusal rank 0
    passed on to all): the first rank to report a message prints it, the
    others stay quiet, and an error of one rank alone is still seen. The
    ranks count their reports in torchrun's own key-value store (its agent's,
    which outlives them); without one, every rank prints."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return True
    try:
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False, timeout=timedelta(seconds=5)
        )
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a restarted job reports afresh
        return store.add(f"srgan/reported/{attempt}/{hashlib.sha256(message.encode()).hexdigest()}", 1) == 1
    except (KeyError, ValueError, RuntimeError, OSError):  # no store to ask: better twice than never
        return True


def unwrap(module: nn.Module) -> nn.Module:
    """The network inside DDP: what is saved, averaged, validated."""
    return module.module if isinstance(module, DistributedDataParallel) else module
