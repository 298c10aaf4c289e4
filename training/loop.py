"""`srgan train`: build the parts from the config, run the epochs, write the
run folder. Read top to bottom: setup, resume, the loop, what happens at
the end of an epoch."""
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

from srgan.configs import Config, SrganError, config_to_yaml
from srgan.configs.schema import TrainConfig
from srgan.data import EpochSampler, TrainPairs, ValImages, resolve_images
from srgan.losses import GeneratorCriterion
from srgan.models import (
    Discriminator,
    Generator,
    generator_from_checkpoint,
    load_checkpoint,
    resolve_checkpoint_path,
    Runtime,
    resolve_runtime,
    save_checkpoint,
)
from srgan.training.ema import GeneratorEMA
from srgan.training.logs import MetricLog, open_tensorboard
from srgan.training.pictures import SampleSheet, draw_curves
from srgan.training.signals import StopSignals, TrainingInterrupted, ignore_interrupts_in_worker
from srgan.training.state import (
    Progress,
    changed_settings,
    check_same_architecture,
    checkpoint_state,
    restore,
)
from srgan.training.step import TrainingParts, gan_step, generator_step
from srgan.training.validation import bicubic_scores, validate

log = logging.getLogger("srgan")


def train(config: Config, resume: Path | None = None) -> Path:
    """Train as `config` says, in a new run folder or continuing `resume`'s;
    returns the run folder. Raises TrainingInterrupted after saving when
    SIGINT/SIGTERM arrives."""
    t = config.train
    runtime = resolve_runtime(t.device, t.precision, t.channels_last)
    seed_everything(t.seed)

    # Inputs first: a mistake in them must not leave a run folder behind.
    train_paths = resolve_images(config.data.train, "data.train", config.data.crop_size)
    val_images = None
    if config.data.val:
        # the SSIM window (11 px) must fit once `scale` px are shaved from each border
        min_side = 2 * config.model.scale + 11
        val_paths = resolve_images(config.data.val, "data.val", min_side)
        val_images = ValImages(val_paths, config.model.scale, config.data.val_max_size)
    resumed_state = None
    if resume is not None:
        checkpoint = Path(resume) / "checkpoints" / "last.pt"
        if not checkpoint.is_file():
            raise SrganError(f"--resume: {resume}: not a run folder with checkpoints/last.pt")
        resumed_state = load_checkpoint(checkpoint)
        check_same_architecture(resumed_state["config"], config, str(checkpoint))

    dataset = TrainPairs(
        train_paths, config.data.crop_size, config.model.scale, config.data.repeat, t.seed, config.data.cache_mb
    )
    sampler = EpochSampler(len(dataset), config.data.batch_size, t.seed)
    loader = DataLoader(
        dataset,
        batch_size=config.data.batch_size,
        sampler=sampler,
        num_workers=config.data.workers,
        pin_memory=runtime.device.type == "cuda",
        persistent_workers=config.data.workers > 0,
        worker_init_fn=ignore_interrupts_in_worker,
        drop_last=True,
    )

    parts = build_parts(config, runtime)
    generator, discriminator = parts.generator, parts.discriminator
    if config.model.init_from and resumed_state is None:
        initialise_generator(generator, config)
    ema = GeneratorEMA(generator, t.ema_decay) if t.ema_decay > 0 else None

    # The run folder: a new one, or the resumed one with its files cut back
    # to the checkpoint.
    if resumed_state is None:
        run_dir = Path(t.run_dir) if t.run_dir else default_run_dir(config)
        if (run_dir / "config.yaml").exists():
            raise SrganError(
                f"train.run_dir: {run_dir} already holds a run; resume it with --resume, or choose another folder"
            )
        progress = Progress()
    else:
        run_dir = Path(resume)
        progress = restore(resumed_state, parts, ema)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(config_to_yaml(config), encoding="utf-8")
    attach_log_file(run_dir / "train.log")
    tensorboard = open_tensorboard(run_dir) if t.tensorboard else None
    metrics = MetricLog(run_dir, tensorboard)
    epoch_finished = progress.epoch_step >= sampler.steps_per_epoch
    if resumed_state is not None:
        metrics.resume(progress.metric_state, progress.step, progress.epoch, epoch_finished)
        log.info("resuming %s from step %d (epoch %d)", run_dir, progress.step, progress.epoch)
        for change in changed_settings(resumed_state["config"], config):
            log.info("  changed: %s", change)
        if epoch_finished:
            progress.epoch, progress.epoch_step = progress.epoch + 1, 0
        progress.metric_state = {}
        del resumed_state

    log.info("run folder %s", run_dir)
    log.info("%s", runtime.describe())
    log.info(
        "generator %s parameters, discriminator %s parameters; %d training images, %d steps an epoch",
        f"{count_parameters(generator):,}", f"{count_parameters(discriminator):,}",
        len(train_paths), sampler.steps_per_epoch,
    )
    bicubic = None
    sheet = None
    if val_images is not None:
        bicubic = bicubic_scores(val_images)
        sheet = SampleSheet(val_images)
        log.info(
            "validation: %d images; bicubic PSNR %.2f dB, SSIM %.4f (Y channel, %d px border shaved)",
            len(val_images), bicubic[0], bicubic[1], config.model.scale,
        )

    def save(best: bool = False, keep_epoch: bool = False) -> None:
        """Checkpoint the run as it stands (the metric log flushed first)."""
        progress.metric_state = metrics.state()
        state = checkpoint_state(parts, ema, config, progress)
        save_checkpoint(run_dir / "checkpoints" / "last.pt", state)
        if best:
            save_checkpoint(run_dir / "checkpoints" / "best.pt", state)
        if keep_epoch:
            save_checkpoint(run_dir / "checkpoints" / f"epoch_{progress.epoch:03d}.pt", state)

    latest: dict = {}  # the last validation's scores

    def run_validation() -> dict:
        """Validate (the EMA weights when kept); 'best' is True when PSNR improved."""
        if latest.get("step") == progress.step:
            return latest  # validated at this very step already
        psnr, ssim = validate(ema.model if ema else generator, val_images, runtime)
        improved = psnr > progress.best_psnr
        if improved:
            progress.best_psnr, progress.best_step = psnr, progress.step
        metrics.validation({
            "epoch": progress.epoch, "step": progress.step, "psnr": psnr, "ssim": ssim,
            "bicubic_psnr": bicubic[0], "bicubic_ssim": bicubic[1],
        })
        latest.update(step=progress.step, psnr=psnr, ssim=ssim, best=improved)
        return latest

    gan = config.loss.weights.adversarial > 0  # else SRResNet training: D is never updated
    done = bool(t.max_steps) and progress.step >= t.max_steps
    if done or progress.epoch > t.epochs:
        log.info("nothing to do: step %d, epoch %d reach train.max_steps / train.epochs", progress.step, progress.epoch - 1)
    with StopSignals() as stop:
        while progress.epoch <= t.epochs and not done:
            sampler.set_epoch(progress.epoch, skip_batches=progress.epoch_step)
            generator.train()
            discriminator.train()
            started = time.perf_counter()
            interval_start, interval_steps = started, 0
            bar = tqdm(
                loader, desc=f"[{progress.epoch}/{t.epochs}]", initial=progress.epoch_step,
                total=sampler.steps_per_epoch, leave=False, dynamic_ncols=True, unit="step",
            )
            for lr, hr in bar:
                set_learning_rates(parts, t, progress.step + 1)
                lr, hr = runtime.tensor(lr), runtime.tensor(hr)
                if progress.step < t.pretrain_steps:
                    stats = generator_step(parts, lr, hr, image_only=True)
                elif gan:
                    stats = gan_step(parts, lr, hr)
                else:
                    stats = generator_step(parts, lr, hr)
                if ema is not None:
                    ema.update(generator)
                progress.step += 1
                progress.epoch_step += 1
                metrics.add(progress.step, stats)
                interval_steps += 1
                done = bool(t.max_steps) and progress.step >= t.max_steps
                if progress.step % t.log_every == 0:
                    now = time.perf_counter()
                    row = metrics.flush(progress.epoch, {
                        "lr_g": parts.optimizer_g.param_groups[0]["lr"],
                        "lr_d": parts.optimizer_d.param_groups[0]["lr"],
                        "images_per_s": interval_steps * config.data.batch_size / (now - interval_start),
                    })
                    interval_start, interval_steps = now, 0
                    bar.set_description(describe(progress.epoch, t.epochs, row))
                if stop.signum is not None:
                    bar.close()
                    metrics.flush(progress.epoch, {})
                    save()
                    raise TrainingInterrupted(
                        stop.signum,
                        f"stopped at step {progress.step}; {run_dir / 'checkpoints' / 'last.pt'} is saved. "
                        f"Resume with: srgan train --resume {run_dir}",
                    )
                if done:
                    break
                if val_images is not None and t.val_every and progress.step % t.val_every == 0:
                    metrics.flush(progress.epoch, {})
                    save(best=run_validation()["best"])
                elif t.save_every and progress.step % t.save_every == 0:
                    metrics.flush(progress.epoch, {})
                    save()
            bar.close()

            # The end of an epoch (or of the run, when max_steps falls inside one).
            metrics.flush(progress.epoch, {})
            # every epoch, or (with val_every) at the end of the run
            validating = val_images is not None and (not t.val_every or done)
            scores = run_validation() if validating else latest
            epoch_complete = progress.epoch_step >= sampler.steps_per_epoch
            row = metrics.end_epoch(progress.epoch, progress.step, {
                "psnr": scores.get("psnr"), "ssim": scores.get("ssim"),
                "seconds": round(time.perf_counter() - started, 3),
            }, finished=epoch_complete)
            summary = describe(progress.epoch, t.epochs, row)
            if scores:
                summary += f" psnr {scores['psnr']:.2f} ssim {scores['ssim']:.4f}"
            log.info("%s (%.1f s)", summary, row["seconds"])
            save(best=validating and scores["best"], keep_epoch=epoch_complete and progress.epoch % t.checkpoint_every == 0)
            if sheet is not None:
                picture = sheet.write(ema.model if ema else generator, runtime,
                                      run_dir / "samples" / f"epoch_{progress.epoch:03d}.png")
                if tensorboard:
                    tensorboard.image("samples", picture, progress.step)
            redraw_curves(run_dir)
            if epoch_complete:
                progress.epoch, progress.epoch_step = progress.epoch + 1, 0
    if tensorboard:
        tensorboard.close()
    log.info("done: %d steps; checkpoint %s", progress.step, run_dir / "checkpoints" / "last.pt")
    return run_dir


def build_parts(config: Config, runtime: Runtime) -> TrainingParts:
    """The networks, the criterion and the optimizers a step needs, on the device."""
    t = config.train
    generator = runtime.place(Generator(config.model.scale, config.model.blocks, config.model.channels))
    discriminator = runtime.place(Discriminator(config.model.d_channels))
    criterion = runtime.place(GeneratorCriterion(config.loss, config.gan.d_loss))
    if t.compile:
        # in place, so state_dict keys stay those of the plain modules
        generator.compile()
        discriminator.compile()
        if criterion.vgg is not None:
            criterion.vgg.compile()
    # fused: one kernel for all parameters (CPU and CUDA, PyTorch >= 2.4)
    adam = {"betas": tuple(t.betas), "fused": runtime.device.type in ("cpu", "cuda")}
    return TrainingParts(
        generator=generator,
        discriminator=discriminator,
        criterion=criterion,
        optimizer_g=torch.optim.Adam(generator.parameters(), lr=t.lr_g, **adam),
        optimizer_d=torch.optim.Adam(discriminator.parameters(), lr=t.lr_d, **adam),
        scaler=torch.amp.GradScaler(runtime.device.type, enabled=runtime.precision == "fp16"),
        runtime=runtime,
        d_loss=config.gan.d_loss,
        update=config.gan.update,
    )


def default_run_dir(config: Config) -> Path:
    return Path("runs") / f"{config.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


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


_curves_warned = False


def redraw_curves(run_dir: Path) -> None:
    global _curves_warned
    try:
        draw_curves(run_dir)
    except ImportError:
        if not _curves_warned:
            log.warning("curves.png needs matplotlib: pip install 'srgan[plot]'")
            _curves_warned = True


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
