"""The alternating D/G update of SRGAN: the heart of training, on one screen."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from srgan.losses import OBJECTIVES, GeneratorCriterion, image_loss, r1_penalty
from srgan.losses.sharpen import unsharp_mask
from srgan.models import Runtime
from srgan.training.distributed import unwrap
from srgan.training.rng import rng_state, set_rng_state


@dataclass
class TrainingParts:
    """Everything one step touches."""

    generator: nn.Module
    discriminator: nn.Module
    criterion: GeneratorCriterion
    optimizer_g: torch.optim.Optimizer
    optimizer_d: torch.optim.Optimizer
    scaler: torch.amp.GradScaler  # a pass-through unless precision is fp16
    runtime: Runtime
    d_loss: str  # the GAN objective: bce, linear, relativistic, hinge or lsgan (losses/adversarial.py)
    update: str  # retain_graph or detach
    accumulate: int = 1  # micro-batches whose gradients each optimizer step sums (train.accumulate)
    ema: nn.Module | None = None  # the EMA generator, set when the criterion needs its output (LDL)
    grad_clip: float = 0.0  # each network's gradient norm at most this (train.grad_clip); 0: off
    r1: float = 0.0  # the R1 penalty's weight (gan.r1); 0: off
    r1_every: int = 16  # lazy R1: one GAN step in this many (gan.r1_every)
    warmup_steps: int = 0  # GAN steps over which the adversarial weight rises from 0 (gan.warmup_steps)


def gan_step(
    parts: TrainingParts, lr: torch.Tensor, hr: torch.Tensor, done: dict | None = None, gan_steps_before: int = 0
) -> dict[str, torch.Tensor]:
    """One D update then one G update, each on the gradients of the batch's
    `accumulate` micro-batches summed. Returns detached 0-dim tensors (no host
    sync here), means over the micro-batches: d_loss, g_loss, d_score = mean
    D(x), g_score = mean D(G(z)), and the generator's loss terms (with
    grad_clip, the gradient norms; on R1's steps, the penalty r1).

    `gan_steps_before`: the GAN steps this run took before this one (its step
    less train.pretrain_steps); the adversarial warm-up and lazy R1 follow it,
    so a resumed run repeats them exactly.

    `done` (the trainer's, for a step that runs out of memory): filled with
    D's statistics and the torch RNG state once D's update is done; a step
    called again with it filled runs G's update alone (D's is not repeated)."""
    # The unsharp-masked HR (loss.sharpen_targets), once a batch, without gradient;
    # D's real examples are the sharpened ones when the adversarial term asks.
    hr_sharp = unsharp_mask(hr) if parts.criterion.sharpen.any else hr
    hr_for_d = hr_sharp if parts.criterion.sharpen.adversarial else hr
    micro = list(zip(*(t.chunk(parts.accumulate) for t in (lr, hr, hr_sharp, hr_for_d)), strict=True))
    warmup = min(1.0, (gan_steps_before + 1) / parts.warmup_steps) if parts.warmup_steps else 1.0
    if done:
        set_rng_state(done["rng"])  # G's half draws what it drew the first time
        return {**done["d"], **g_half(parts, micro, None, warmup)}
    fakes, d_stats = d_half(parts, micro, parts.r1 > 0 and gan_steps_before % parts.r1_every == 0)
    if done is not None:
        done.update(d=d_stats, rng=rng_state())
    return {**d_stats, **g_half(parts, micro, fakes, warmup)}


def d_half(parts: TrainingParts, micro: list, with_r1: bool) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """gan_step's steps 1 and 2: the fakes, and D's update on them (with the
    R1 penalty when `with_r1`); returns the fakes and D's statistics."""
    G, D, scaler, objective = parts.generator, parts.discriminator, parts.scaler, OBJECTIVES[parts.d_loss]
    k = len(micro)

    # 1. The generator runs once; with one micro-batch its graph serves both
    # updates. With several, keeping every micro-batch's graph until G's update
    # would take the memory of the whole batch, which accumulating exists to
    # avoid. So D judges fakes made without a graph, and step 3 runs G again,
    # one micro-batch (one graph) at a time: the cost is one extra forward
    # without gradient per micro-batch.
    with parts.runtime.autocast(), torch.set_grad_enabled(k == 1):
        fakes = [G(x) for x, *_ in micro]

    # 2. D step: minimise d_loss on D(x) and D(G(z)).
    parts.optimizer_d.zero_grad(set_to_none=True)
    d_rows = []
    for fake, (_, _, _, real_for_d) in zip(fakes, micro, strict=True):
        if with_r1:  # R1 differentiates D(x) with respect to x
            real_for_d = real_for_d.detach().requires_grad_(True)
        with parts.runtime.autocast():
            real_logit = D(real_for_d)
            fake_logit = D(fake.detach() if parts.update == "detach" else fake)
        d_loss = objective.d_loss(real_logit, fake_logit)
        row = {
            "d_loss": d_loss.detach(),
            "d_score": objective.score(real_logit.detach().float()).mean(),
            "g_score": objective.score(fake_logit.detach().float()).mean(),
        }
        if with_r1:  # lazy: scaled by r1_every, so that its pull on average is r1 / 2 a step
            penalty = r1_penalty(real_logit, real_for_d, scaler)
            d_loss = d_loss + parts.r1 / 2 * parts.r1_every * penalty
            row["r1"] = penalty.detach()  # logged apart: d_loss stays the objective's
        if parts.update == "retain_graph":
            # retain_graph keeps the generator's graph (through `fake`) alive for
            # the G step; `inputs` limits this backward to D's parameters, so no
            # generator gradient is computed here only to be thrown away.
            scaler.scale(d_loss / k).backward(retain_graph=True, inputs=list(D.parameters()))
        else:
            scaler.scale(d_loss / k).backward()
        d_rows.append(row)
    clipped = clip_gradients(parts, parts.optimizer_d, D, "d")
    scaler.step(parts.optimizer_d)
    # retain_graph kept the D step's own saved activations too: drop them now,
    # not at the end of the step, where they would still hold memory during the G step.
    del d_loss, real_logit, fake_logit
    return fakes, {**mean_rows(d_rows), **clipped}


def g_half(
    parts: TrainingParts, micro: list, fakes: list[torch.Tensor] | None, warmup: float
) -> dict[str, torch.Tensor]:
    """gan_step's step 3: G's update, on `fakes` (None: G runs again on each
    micro-batch), with the adversarial weight times `warmup`; returns G's statistics."""
    G, D, scaler, objective = parts.generator, parts.discriminator, parts.scaler, OBJECTIVES[parts.d_loss]
    k = len(micro)

    # 3. G step. It evaluates D(G(z)) again, under the D just updated. Reusing
    # the D(G(z)) from before optimizer_d.step(), as the widely copied loop
    # does, fails: that step changes in place D's weights, which autograd saved
    # for the backward, so g_loss.backward() raises "modified by an inplace
    # operation".
    # An objective that compares with D(x) (relativistic) gets it from the
    # updated D too, without gradient: G's update needs none through it.
    # Under DDP these forwards go through the bare D: its gradients are not
    # wanted (so nothing to average), and a DDP forward whose backward never
    # reaches D's weights would leave DDP waiting for them at the next step.
    D.requires_grad_(False)  # G's update needs no gradients for D's weights
    judge = unwrap(D)
    parts.optimizer_g.zero_grad(set_to_none=True)
    g_rows = []
    try:
        made: list[torch.Tensor | None] = list(fakes) if fakes is not None else [None] * k
        for fake, (x, real, real_sharp, real_for_d) in zip(made, micro, strict=True):
            with parts.runtime.autocast():
                if fake is None or k > 1:  # made without a graph in step 1, or not made
                    fake = G(x)
                with torch.no_grad():
                    real_logit_g = judge(real_for_d) if objective.needs_real else None
                g_loss, terms = parts.criterion(
                    fake, real, judge(fake), real_logit_g, real_sharp, ema_output(parts, x), warmup
                )
            scaler.scale(g_loss / k).backward()
            g_rows.append({"g_loss": g_loss.detach(), **{name: value.detach() for name, value in terms.items()}})
    finally:  # also after an out-of-memory error, which the trainer survives
        D.requires_grad_(True)
    clipped = clip_gradients(parts, parts.optimizer_g, G, "g")
    scaler.step(parts.optimizer_g)
    scaler.update()
    return {**mean_rows(g_rows), **clipped}


def clip_gradients(
    parts: TrainingParts, optimizer: torch.optim.Optimizer, network: nn.Module, prefix: str
) -> dict[str, torch.Tensor]:
    """With train.grad_clip: the network's gradients scaled down to that total
    norm where above it (unscaled first under fp16: the scaler's step then
    knows); returns the norm before clipping and whether it clipped (1 or 0),
    as device tensors. Without: nothing, and no work."""
    if not parts.grad_clip:
        return {}
    parts.scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(network.parameters(), parts.grad_clip).float()
    return {f"{prefix}_grad_norm": norm, f"{prefix}_clipped": (norm > parts.grad_clip).float()}


def ema_output(parts: TrainingParts, x: torch.Tensor) -> torch.Tensor | None:
    """The EMA generator's SR of `x`, without gradient, when the criterion
    needs it (LDL's map); None, and no forward, otherwise."""
    if not parts.criterion.needs_ema:
        return None
    assert parts.ema is not None, "loss.weights.ldl needs train.ema_decay > 0: the config check says so"
    with torch.no_grad():
        return parts.ema(x)


def mean_rows(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Each statistic's mean over the micro-batches (equal sizes: the batch's mean)."""
    return {name: torch.stack([row[name] for row in rows]).mean(0) for name in rows[0]}


def generator_step(
    parts: TrainingParts, lr: torch.Tensor, hr: torch.Tensor, image_only: bool = False
) -> dict[str, torch.Tensor]:
    """G alone, on its criterion without the adversarial term (SRResNet
    training), or on the image loss only (`image_only`: the pretraining
    phase before the GAN); gradients of the micro-batches summed as in gan_step.
    Returns gan_step's statistics less D's: g_loss and the loss terms."""
    criterion = parts.criterion
    hr_sharp = unsharp_mask(hr) if criterion.sharpen.any else hr  # as in gan_step
    micro = list(zip(*(t.chunk(parts.accumulate) for t in (lr, hr, hr_sharp)), strict=True))
    parts.optimizer_g.zero_grad(set_to_none=True)
    rows = []
    for x, real, real_sharp in micro:
        with parts.runtime.autocast():
            fake = parts.generator(x)
            if image_only:
                target = criterion.target(real, real_sharp, criterion.sharpen.image)
                terms = {"image": image_loss(fake.float(), target, criterion.image_kind)}
                g_loss = terms["image"]
            else:
                g_loss, terms = criterion(fake, real, None, None, real_sharp, ema_output(parts, x))
        parts.scaler.scale(g_loss / len(micro)).backward()
        rows.append({"g_loss": g_loss.detach(), **{name: value.detach() for name, value in terms.items()}})
    clipped = clip_gradients(parts, parts.optimizer_g, parts.generator, "g")
    parts.scaler.step(parts.optimizer_g)
    parts.scaler.update()
    return {**mean_rows(rows), **clipped}
