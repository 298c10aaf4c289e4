"""`srgan train`: build the parts from the config, run the epochs, write the
run folder. Read top to bottom: setup, the loop, the end of an epoch."""
from __future__ import annotations

import logging
import random
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from srgan.configs import Config, SrganError, config_to_dict, config_to_yaml
from srgan.configs.schema import TrainConfig
from srgan.data import EpochSampler, TrainPairs, resolve_images
from srgan.losses import GeneratorCriterion
from srgan.models import (
    Discriminator,
    Generator,
    generator_from_checkpoint,
    load_checkpoint,
    resolve_checkpoint_path,
    resolve_runtime,
    save_checkpoint,
)
from srgan.training.logs import MetricLog
from srgan.training.step import TrainingParts, gan_step, generator_step

log = logging.getLogger("srgan")


def default_run_dir(config: Config) -> Path:
    return Path("runs") / f"{config.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def train(config: Config) -> Path:
    """Train as `config` says; returns the run folder."""
    t = config.train
    runtime = resolve_runtime(t.device, t.precision)
    seed_everything(t.seed)

    train_paths = resolve_images(config.data.train, "data.train", config.data.crop_size)
    dataset = TrainPairs(train_paths, config.data.crop_size, config.model.scale, config.data.repeat, t.seed)
    sampler = EpochSampler(len(dataset), config.data.batch_size, t.seed)
    loader = DataLoader(
        dataset,
        batch_size=config.data.batch_size,
        sampler=sampler,
        num_workers=config.data.workers,
        pin_memory=runtime.device.type == "cuda",
        persistent_workers=config.data.workers > 0,
        drop_last=True,
    )

    generator = Generator(config.model.scale, config.model.blocks, config.model.channels)
    if config.model.init_from:
        initialise_generator(generator, config)
    generator = generator.to(runtime.device)
    discriminator = Discriminator(config.model.d_channels).to(runtime.device)
    criterion = GeneratorCriterion(config.loss, config.gan.d_loss).to(runtime.device)
    parts = TrainingParts(
        generator=generator,
        discriminator=discriminator,
        criterion=criterion,
        optimizer_g=torch.optim.Adam(generator.parameters(), lr=t.lr_g, betas=tuple(t.betas)),
        optimizer_d=torch.optim.Adam(discriminator.parameters(), lr=t.lr_d, betas=tuple(t.betas)),
        scaler=torch.amp.GradScaler(runtime.device.type, enabled=runtime.precision == "fp16"),
        runtime=runtime,
        d_loss=config.gan.d_loss,
        update=config.gan.update,
    )

    run_dir = Path(t.run_dir) if t.run_dir else default_run_dir(config)
    if (run_dir / "config.yaml").exists():
        raise SrganError(f"train.run_dir: {run_dir} already holds a run; choose another folder or remove it")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(config_to_yaml(config), encoding="utf-8")
    attach_log_file(run_dir / "train.log")
    metrics = MetricLog(run_dir)

    log.info("run folder %s", run_dir)
    log.info("%s", runtime.describe())
    log.info(
        "generator %s parameters, discriminator %s parameters; %d training images, %d steps an epoch",
        f"{count_parameters(generator):,}", f"{count_parameters(discriminator):,}",
        len(train_paths), sampler.steps_per_epoch,
    )

    gan = config.loss.weights.adversarial > 0  # else SRResNet training: D is never updated
    step = 0
    for epoch in range(1, t.epochs + 1):
        sampler.set_epoch(epoch)
        generator.train()
        discriminator.train()
        started = time.perf_counter()
        interval_start, interval_steps = started, 0
        bar = tqdm(loader, desc=f"[{epoch}/{t.epochs}]", leave=False, dynamic_ncols=True, unit="step")
        for lr, hr in bar:
            set_learning_rates(parts, t, step + 1)
            lr = lr.to(runtime.device, non_blocking=True)
            hr = hr.to(runtime.device, non_blocking=True)
            if step < t.pretrain_steps:
                stats = generator_step(parts, lr, hr, image_only=True)
            elif gan:
                stats = gan_step(parts, lr, hr)
            else:
                stats = generator_step(parts, lr, hr)
            metrics.add(step + 1, stats)
            step += 1
            interval_steps += 1
            last_of_run = t.max_steps and step >= t.max_steps
            if step % t.log_every == 0 or last_of_run:
                now = time.perf_counter()
                row = metrics.flush(epoch, {
                    "lr_g": parts.optimizer_g.param_groups[0]["lr"],
                    "lr_d": parts.optimizer_d.param_groups[0]["lr"],
                    "images_per_s": interval_steps * config.data.batch_size / (now - interval_start),
                })
                interval_start, interval_steps = now, 0
                bar.set_description(describe(epoch, t.epochs, row))
            if last_of_run:
                break
        bar.close()
        metrics.flush(epoch, {})
        row = metrics.end_epoch(epoch, step, {"seconds": round(time.perf_counter() - started, 3)})
        log.info("%s (%.1f s)", describe(epoch, t.epochs, row), row["seconds"])
        state = checkpoint_state(parts, config, epoch, step)
        save_checkpoint(run_dir / "checkpoints" / "last.pt", state)
        if epoch % t.checkpoint_every == 0:
            save_checkpoint(run_dir / "checkpoints" / f"epoch_{epoch:03d}.pt", state)
        if t.max_steps and step >= t.max_steps:
            break
    log.info("done: %d steps; checkpoint %s", step, run_dir / "checkpoints" / "last.pt")
    return run_dir


def describe(epoch: int, epochs: int, row: dict) -> str:
    """The progress bar's text: [epoch/epochs] d_loss g_loss d_score g_score."""
    shown = [f"{name} {row[name]:.4f}" for name in ("d_loss", "g_loss", "d_score", "g_score") if name in row]
    return f"[{epoch}/{epochs}] " + " ".join(shown)


def initialise_generator(generator: Generator, config: Config) -> None:
    """Start from the generator weights of another run (a trained SRResNet
    before the GAN phase); its architecture must be this run's."""
    path = resolve_checkpoint_path(config.model.init_from)
    state = load_checkpoint(path)
    theirs = state["config"].get("model", {})
    for key in ("scale", "blocks", "channels"):
        if theirs.get(key) != getattr(config.model, key):
            raise SrganError(
                f"model.init_from: {path} has model.{key} = {theirs.get(key)!r}, this run {getattr(config.model, key)!r}"
            )
    generator.load_state_dict(generator_from_checkpoint(state, str(path)).state_dict())
    log.info("generator initialised from %s (step %s)", path, state.get("step"))


def set_learning_rates(parts: TrainingParts, t: TrainConfig, step: int) -> None:
    """The rates for `step` (1-based): the base rates times gamma for every
    milestone already passed. Derived from the step, so resuming needs no state."""
    factor = t.lr_schedule.gamma ** sum(step > m for m in t.lr_schedule.milestones)
    for optimizer, base in ((parts.optimizer_g, t.lr_g), (parts.optimizer_d, t.lr_d)):
        for group in optimizer.param_groups:
            group["lr"] = base * factor


def checkpoint_state(parts: TrainingParts, config: Config, epoch: int, step: int) -> dict:
    return {
        "generator": parts.generator.state_dict(),
        "discriminator": parts.discriminator.state_dict(),
        "optimizer_g": parts.optimizer_g.state_dict(),
        "optimizer_d": parts.optimizer_d.state_dict(),
        "epoch": epoch,
        "step": step,
        "config": config_to_dict(config),
    }


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def attach_log_file(path: Path) -> None:
    """Copy the run's messages (settings, warnings, epoch summaries) to train.log."""
    logger = logging.getLogger("srgan")
    for handler in list(logger.handlers):
        if getattr(handler, "srgan_run_log", False):
            logger.removeHandler(handler)
            handler.close()
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.srgan_run_log = True
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
