"""`srgan train`: build the parts from the config, run the epochs, write the
run folder.

`train()` runs it all; `Trainer` holds one method per phase, in the order
they run: setup (`__init__`, one method per part: inputs, runtime, data,
networks, run folder, resume, logs, DDP), `fit` (the epochs), `run_epoch`
(the steps), `step` (one update, see step.py), `end_epoch`, `validate`,
`checkpoint`. The trainer writes what must survive a crash before the work
that might crash: a checkpoint before a validation, and the progress
records which of that work is done (`Ledger`), so that a resumed run
finishes it."""

from __future__ import annotations

import gc
import logging
import math
import random
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from srgan.configs import Config, resume_config
from srgan.configs.schema import TrainConfig
from srgan.data import EpochSampler
from srgan.data.paired import open_image_set, training_crops
from srgan.files import DiskFull
from srgan.files.atomic import FULL_DISK_ERRNOS
from srgan.files.errors import RunFailed, SrganError, first_line
from srgan.losses import GeneratorCriterion
from srgan.metrics import ImageScores, better, metric_columns, worst_score
from srgan.models import (
    Runtime,
    SRGenerator,
    build_discriminator,
    build_generator,
    resolve_architecture,
    resolve_runtime,
    save_checkpoint,
)
from srgan.models.precision_choice import PrecisionChoice, measure_training
from srgan.models.precision_choice import apply as apply_precision
from srgan.models.runtime import is_out_of_memory, set_deterministic
from srgan.models.spandrel_generator import SpandrelGenerator, check_crop
from srgan.training.distributed import World, unwrap
from srgan.training.ema import GeneratorEMA
from srgan.training.init_from import InitWeights, read_init_files, start_from
from srgan.training.logs import (
    ARTEFACT_TERMS,
    OPTIONAL_METRICS,
    MetricLog,
    NonFiniteLoss,
    QuietFileHandler,
    TensorBoard,
    open_tensorboard,
)
from srgan.training.micro_batch import Plan, plan_micro_batch, smaller_micro_batch
from srgan.training.pictures import SampleSheet, draw_curves
from srgan.training.rng import rng_state, set_rng_state
from srgan.training.run_folder import RunFolder, recorded_precision
from srgan.training.signals import StopSignals, TrainingInterrupted, ignore_interrupts_in_worker
from srgan.training.state import (
    PRETRAINED_NAME,
    Progress,
    changed_settings,
    check_same_architecture,
    checkpoint_state,
    load_checkpoint,
    pretrained_state,
    restore,
)
from srgan.training.step import TrainingParts, gan_step, generator_step
from srgan.training.validation import checked_validation_set, validate

log = logging.getLogger("srgan")


def train(config: Config, resume: Path | None = None) -> Path:
    """Train as `config` says, in a new run folder or continuing `resume`'s;
    returns the run folder. Raises TrainingInterrupted after saving when
    SIGINT/SIGTERM arrives, and SrganError for a refused input, a full disk
    (DiskFull), running out of memory or a broken process group."""
    world = World.from_environment(config.train.device, config.train.dist_timeout_s)
    trainer: Trainer | None = None
    try:
        trainer = Trainer(config, resume, world)
        try:
            with StopSignals() as stop:
                trainer.fit(stop)
        finally:
            trainer.close()
    except DiskFull as error:
        folder = resume or config.train.run_dir or "RUN_DIR"
        raise DiskFull(
            f"{error}; the last good checkpoint is kept. Free some space, then: srgan train --resume {folder}"
        ) from None
    except (MemoryError, RuntimeError) as error:
        if is_out_of_memory(error):  # at the least micro-batch, or outside a step (Trainer.step halves it in one)
            raise RunFailed(
                f"out of memory ({first_line(error, 120)}) with data.batch_size {config.data.batch_size} and "
                f"data.crop_size {config.data.crop_size}, at micro-batch {micro_batch_of(trainer)}: lower the "
                "crop (or model.blocks/channels); the last checkpoint is kept"
            ) from None
        if isinstance(error, RuntimeError) and world.distributed:
            # A collective failed: another rank stopped (its own message says why) or died.
            raise SrganError(
                f"rank {world.rank}: the job's process group broke ({first_line(error, 160)}); "
                "the last checkpoint is kept"
            ) from None
        raise
    finally:
        world.close()
    return trainer.folder.path


def read_inputs(config: Config, resume: Path | None) -> tuple[Config, InitWeights | None]:
    """The config to train, and the init files' weights when it names any.
    Raises SrganError for a `resume` that is not a run folder, before
    anything is built. It reads the init files first, since they may
    complete the network's shape; a resume reads neither."""
    if resume is not None:
        resume_config(resume)
    if resume is None and (config.model.init_from or config.gan.init_from):
        init = read_init_files(config)
        return resolve_architecture(init.config), init
    return resolve_architecture(config), None


class Trainer:
    def __init__(self, config: Config, resume: Path | None = None, world: World | None = None):
        """Set the run up, in the order a mistake should stop it: the inputs
        and the data before any run folder is touched, the folder's lock
        before anything is read from it or written to it."""
        self.world = world or World()
        self.config, self.init = read_inputs(config, resume)
        self.runtime = self.start_runtime(resume)
        self.open_data()
        self.build_networks()
        self.plan = self.plan_micro_batch()
        started = self.open_run_folder(resume)
        try:
            self.resume_or_start(started)
            self.open_logs(started)
        except BaseException:
            self.folder.close()
            raise
        self.wrap_for_ddp()
        self.start_session()
        self.describe_setup(started)

    # ---- setup, in the order __init__ runs it ------------------------------------

    def start_runtime(self, resume: Path | None) -> Runtime:
        """The device and precision (auto: timed on this machine, or a
        resumed run's own: see choose_precision), and the seeded RNGs."""
        t = self.config.train
        runtime = resolve_runtime(
            self.world.device(t.device), t.precision, t.channels_last, keys=("train.device", "train.precision")
        )
        set_deterministic(t.deterministic)  # before the timing: it times the kernels the run uses
        self.precision = choose_precision(runtime, self.config, resume, self.world)
        seed_everything(t.seed)
        return apply_precision(runtime, self.precision)

    def open_data(self) -> None:
        """The training crops and their loader, the validation set and its
        bicubic scores. A mistake in them must not touch a run folder."""
        d, t, scale = self.config.data, self.config.train, self.config.model.scale
        train_images = open_image_set(
            d.train, d.train_lr, "data.train", "data.train_lr", scale, d.crop_size, d.cache_mb
        )
        # Real-ESRGAN's pipeline, per sample in the DataLoader workers (docs/degradations.md measures why)
        degradation = d.pipeline
        self.val_images, self.bicubic = None, dict[str, float]()
        if d.val:
            # the SSIM window (11 px) must fit once `scale` px are shaved from each border
            val_images = open_image_set(d.val, d.val_lr, "data.val", "data.val_lr", scale, 2 * scale + 11)
            # the learned metrics' weights: a missing file stops the run here, before any work
            self.scores = ImageScores(t.val_metrics, self.runtime.device, "train.val_metrics")
            self.val_images, self.bicubic = checked_validation_set(
                val_images, scale, d.val_max_size, self.scores, degradation, t.seed
            )
        self.dataset = training_crops(train_images, d.crop_size, scale, d.repeat, t.seed, degradation)
        self.sampler = EpochSampler(len(self.dataset), d.batch_size, t.seed, self.world.rank, self.world.size)
        self.loader = DataLoader(
            self.dataset,
            batch_size=d.batch_size,
            sampler=self.sampler,
            num_workers=d.workers,
            pin_memory=self.runtime.device.type == "cuda",
            persistent_workers=d.workers > 0,
            worker_init_fn=ignore_interrupts_in_worker,
            drop_last=True,
        )

    def build_networks(self) -> None:
        """The networks, criterion and optimizers (see build_parts), and the generator's EMA."""
        t = self.config.train
        self.parts = build_parts(self.config, self.runtime)
        self.ema = GeneratorEMA(self.parts.generator, t.ema_decay) if t.ema_decay > 0 else None
        if self.parts.criterion.needs_ema:  # LDL's map: the config check made sure there is an EMA
            self.parts.ema = self.ema.model if self.ema is not None else None
        self.gan = self.config.loss.weights.adversarial > 0  # else SRResNet training: D is never updated

    def plan_micro_batch(self) -> Plan:
        """The micro-batch (see micro_batch.py), before any run folder is
        touched: a batch of which one crop does not fit is refused here.
        Under DDP every rank plans alone and all take the smallest plan (one
        collective), so that their steps sum the same micro-batches."""
        try:
            plan, refused = plan_micro_batch(self.config, self.parts, self.gan), None
        except SrganError as error:
            if not self.world.distributed:
                raise
            plan, refused = None, error
        if not self.world.distributed:
            assert plan is not None
            return plan
        agreed = int(self.world.minimum(float(plan.micro_batch if plan else 0), self.runtime.device))
        if refused is not None:
            raise refused
        if agreed == 0:
            raise SrganError(f"rank {self.world.rank}: another rank cannot fit one crop's step (its message says why)")
        assert plan is not None
        if agreed != plan.micro_batch:
            plan = Plan(agreed, plan.batch, "the ranks' smallest", least=plan.least)
        return plan

    def open_run_folder(self, resume: Path | None) -> bool:
        """The run folder, locked from here on by rank 0, which alone writes
        it: a new one, or the resumed one with its files cut back to the
        checkpoint. Returns whether it holds a checkpoint to resume from."""
        t = self.config.train
        self.folder = RunFolder(
            Path(resume)
            if resume is not None
            else Path(self.world.broadcast(t.run_dir or str(default_run_dir(self.config))))
        )  # one timestamp for all ranks
        self.tensorboard: TensorBoard | None = None
        return self.world.run_on_main(lambda: self.folder.open(resuming=resume is not None))

    def resume_or_start(self, started: bool) -> None:
        """The progress of the checkpoint in the run folder (its weights,
        optimizer and RNG states loaded; every rank reads it), or a fresh
        start (from the init files when given)."""
        if not started:
            if self.init is not None:
                start_from(self.init, self.parts.generator, self.parts.discriminator)
                if self.ema is not None:
                    self.ema.model.load_state_dict(self.parts.generator.state_dict())
            best_by = self.config.train.best_by
            self.progress = Progress(best_by=best_by, best_value=worst_score(best_by))
        else:
            state = load_checkpoint(self.folder.last)
            check_same_architecture(state["config"], self.config, str(self.folder.last))
            self.changes = changed_settings(state["config"], self.config)  # listed once the log file is open
            self.progress = restore(state, self.parts, self.ema, self.config.train.best_by)
        self.ledger = Ledger(self.progress, self.sampler)
        self.settle_micro_batch()

    def settle_micro_batch(self) -> None:
        """The micro-batch the steps take: the checkpoint's (as planned or
        halved then) unless the config pins one, so that a resumed run sums
        the micro-batches the uninterrupted one did; else the plan's."""
        p, batch = self.progress, self.config.data.batch_size
        if p.micro_batch and self.plan.how != "pinned" and batch % p.micro_batch == 0:
            if p.micro_batch != self.plan.micro_batch:
                self.plan = Plan(p.micro_batch, batch, "kept from the checkpoint", least=self.plan.least)
        else:
            p.micro_batch = self.plan.micro_batch
        self.parts.accumulate = batch // p.micro_batch

    def open_logs(self, started: bool) -> None:
        """metrics.jsonl and epochs.csv (cut back to the checkpoint when
        resuming), then, on rank 0, config.yaml, train.log and TensorBoard:
        everything the run resumes from is checked, now the folder may change."""
        t = self.config.train
        self.metrics = MetricLog(
            self.folder.path,
            write=self.world.is_main,
            reduce=self.world.mean,
            extra={"world_size": self.world.size},
            val_metrics=t.val_metrics,
        )
        if started:
            self.ledger.resume_logs(self.metrics)
        if self.world.is_main:
            self.folder.write_config(self.config)
            attach_log_file(self.folder.path / "train.log")
            self.tensorboard = open_tensorboard(self.folder.path) if t.tensorboard else None
            self.metrics.tensorboard = self.tensorboard

    def wrap_for_ddp(self) -> None:
        """The networks the step runs: under DDP on several ranks (see distributed.py)."""
        t = self.config.train
        self.parts.generator = self.world.wrap(self.parts.generator, t.sync_bn)
        self.parts.discriminator = self.world.wrap(self.parts.discriminator, t.sync_bn)

    def start_session(self) -> None:
        """The sample crops drawn each epoch, the clocks, and run.json's "running"."""
        self.sheet = SampleSheet(self.val_images) if self.val_images is not None else None
        self.draws_curves = self.config.train.curves  # until matplotlib turns out to be missing
        self._interval = (time.perf_counter(), 0)  # start and steps of the current metrics row
        self._session = (time.perf_counter(), self.progress.wall_seconds)  # when this session began, time before it
        self.record("running")

    def describe_setup(self, started: bool) -> None:
        """The log's account of the run about to start."""
        world, config, t = self.world, self.config, self.config.train
        if world.distributed:
            log.info(
                "%d ranks (%s), data.batch_size %d a rank: %d crops a step",
                world.size,
                "nccl" if self.runtime.device.type == "cuda" else "gloo",
                config.data.batch_size,
                self.sampler.global_batch,
            )
        if started:
            log.info("resuming %s from step %d (epoch %d)", self.folder.path, self.progress.step, self.progress.epoch)
            for change in self.changes:
                log.info("  changed: %s", change)
        log.info("run folder %s", self.folder.path)
        for note in self.init.notes if self.init is not None else ():
            log.info("%s", note)
        log.info("%s", self.runtime.describe())
        log.info("%s", self.plan.describe())
        log.info(
            "generator %s parameters, discriminator %s parameters; %d training images, %d steps an epoch",
            f"{count_parameters(unwrap(self.parts.generator)):,}",
            f"{count_parameters(unwrap(self.parts.discriminator)):,}",
            len(self.dataset.images),
            self.sampler.steps_per_epoch,
        )
        if self.val_images is not None:
            log.info(
                "validation: %d images; bicubic %s (PSNR/SSIM: Y channel, %d px border shaved; "
                "LPIPS/DISTS: RGB, lower is better; CIEDE2000: CIELAB, lower is better, shift_a/b: SR - HR); "
                "best.pt by %s",
                len(self.val_images),
                describe_scores(self.bicubic),
                config.model.scale,
                t.best_by,
            )
            for warning in self.scores.warnings:  # a backbone file that is not torchvision's
                log.warning("validation: %s", warning)

    # ---- the epochs --------------------------------------------------------------

    def fit(self, stop: StopSignals) -> None:
        """The epochs, and run.json's last word on how they ended."""
        try:
            self.run_epochs(stop)
        except TrainingInterrupted:
            self.record("interrupted")
            raise
        except BaseException as error:
            self.record("failed", first_line(error))
            raise
        self.record("finished")

    def run_epochs(self, stop: StopSignals) -> None:
        t, p = self.config.train, self.progress
        self.finish_pending_work()
        if self.done() or p.epoch > t.epochs:
            log.info("nothing to do: step %d, epoch %d reach train.max_steps / train.epochs", p.step, p.epoch - 1)
        while p.epoch <= t.epochs and not self.done():
            self.run_epoch(stop)
            signum = self.stop_requested(stop, True)
            if signum:  # arrived during the end of the epoch, which saved
                self.interrupt(signum)
        log.info("done: %d steps; checkpoint %s", p.step, self.folder.last)

    def finish_pending_work(self) -> None:
        """A resumed checkpoint may have been written just before work that
        then did not happen (a kill during validation, a signal on an
        epoch's last step): do it now, as the uninterrupted run did."""
        if self.progress.step == 0:
            return
        # Both may be pending (a kill during a train.val_every validation on an
        # epoch's last step): the validation first, as the step loop runs it
        # before the epoch's end.
        if self.validation_due() and not self.ledger.validated():
            self.validate_and_checkpoint()
        if self.ledger.epoch_end_pending(self.done()):
            self.end_epoch(started=time.perf_counter())

    def run_epoch(self, stop: StopSignals) -> None:
        t, p = self.config.train, self.progress
        self.ledger.start_epoch()
        self.parts.generator.train()
        self.parts.discriminator.train()
        started = time.perf_counter()
        self._interval = (started, 0)
        bar = self.progress_bar()
        for lr, hr in batches(self.loader):
            self.step(lr, hr)
            bar.update()
            row_due = p.step % t.log_every == 0
            if row_due:
                self.log_row(bar)
            signum = self.stop_requested(stop, row_due)
            if signum:
                bar.close()
                self.interrupt(signum)
            if self.done():
                break
            if self.validation_due():
                self.validate_and_checkpoint()
            elif t.save_every and p.step % t.save_every == 0:
                self.checkpoint()
        bar.close()
        self.end_epoch(started)

    def progress_bar(self) -> tqdm:
        """The epoch's bar on rank 0, from the steps the epoch has already taken."""
        return tqdm(
            total=self.sampler.steps_per_epoch,
            initial=self.sampler.steps_per_epoch - self.sampler.steps_left(),
            desc=f"[{self.progress.epoch}/{self.epochs()}]",
            disable=not self.world.is_main,
            leave=False,
            dynamic_ncols=True,
            unit="step",
            mininterval=0.1 if sys.stderr.isatty() else 60,
        )  # when stderr is a log file, a line a minute

    def step(self, lr: torch.Tensor, hr: torch.Tensor) -> None:
        """One training step on a batch: the generator alone while
        pretraining (or for SRResNet), else the alternating D/G update."""
        t, p = self.config.train, self.progress
        set_learning_rates(self.parts, t, p.step + 1)
        lr, hr = self.runtime.tensor(lr), self.runtime.tensor(hr)
        saved, done = rng_state(), dict[str, object]()
        while True:
            try:
                stats = self.run_step(lr, hr, done)
                break
            except (MemoryError, RuntimeError) as error:
                smaller = smaller_micro_batch(self.config.data.batch_size, p.micro_batch, self.plan.least)
                if not is_out_of_memory(error) or smaller is None:
                    raise
                reason = first_line(error, 120)
            # here, out of the except block, its traceback no longer holds the step's tensors
            self.halve_micro_batch(smaller, reason)
            if not done:  # nothing updated yet: the whole step again, drawing the same numbers
                set_rng_state(saved)
        if self.ema is not None:
            self.ema.update(unwrap(self.parts.generator))
        self.ledger.took_step()
        if p.step == t.pretrain_steps and t.save_pretrained:
            self.save_pretrained()
        self.metrics.add(p.step, stats)
        start, steps = self._interval
        self._interval = (start, steps + 1)

    def run_step(self, lr: torch.Tensor, hr: torch.Tensor, done: dict) -> dict[str, torch.Tensor]:
        """The step's update: `done` as gan_step takes it (G's half alone when D's is done)."""
        t, p = self.config.train, self.progress
        if p.step < t.pretrain_steps:
            return generator_step(self.parts, lr, hr, image_only=True)
        if self.gan:
            return gan_step(self.parts, lr, hr, done, gan_steps_before=p.step - t.pretrain_steps)
        return generator_step(self.parts, lr, hr)

    def halve_micro_batch(self, smaller: int, reason: str) -> None:
        """After an out-of-memory error in a step: its partial gradients
        dropped, the micro-batch `smaller` (the next divisor of the batch at
        or below half), said in one line and in run.json. Raises SrganError
        under DDP, where the other ranks are already inside the step's
        collectives."""
        p, batch = self.progress, self.config.data.batch_size
        if self.world.distributed:
            raise SrganError(
                f"rank {self.world.rank}: out of memory at step {p.step + 1} ({reason}) at micro-batch "
                f"{p.micro_batch}; under DDP the ranks cannot halve it mid-step together: resume with "
                f"--set train.micro_batch={smaller} (the last checkpoint is kept)"
            )
        for optimizer in (self.parts.optimizer_g, self.parts.optimizer_d):
            optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if self.runtime.device.type == "cuda":
            torch.cuda.empty_cache()
        log.warning(
            "step %d: out of memory at micro-batch %d (%s): micro-batch %d x %d from here, the step run again",
            p.step + 1,
            p.micro_batch,
            reason,
            smaller,
            batch // smaller,
        )
        p.micro_batch, self.parts.accumulate = smaller, batch // smaller
        p.micro_batch_changes.append({"step": p.step + 1, "micro_batch": smaller})
        self.record("running")

    def log_row(self, bar: tqdm) -> None:
        """metrics.jsonl's row for the steps since the last one (the one host sync)."""
        row = self.flush_row()
        assert row is not None  # a step was added since the last row
        bar.set_description(describe(self.progress.epoch, self.epochs(), row))

    def flush_row(self) -> dict[str, float] | None:
        """Write metrics.jsonl's row for the steps added since the last one
        (None when there are none), with the learning rates and the speed."""
        now = time.perf_counter()
        start, steps = self._interval
        row = self.metrics.flush(
            self.progress.epoch,
            {
                "lr_g": self.parts.optimizer_g.param_groups[0]["lr"],
                "lr_d": self.parts.optimizer_d.param_groups[0]["lr"],
                "images_per_s": steps * self.sampler.global_batch / max(now - start, 1e-9),  # all ranks together
            },
        )
        if row is not None:
            self._interval = (now, 0)
        return row

    def end_epoch(self, started: float) -> None:
        """The end of an epoch (or of the run, when max_steps falls inside
        one): its validation, its epochs.csv row, its checkpoints, pictures."""
        t, p = self.config.train, self.progress
        complete = self.ledger.epoch_complete()
        # Flush the epoch's last steps into its own means before its row is
        # written; the checkpoint's flush would put them into the next epoch's.
        self.flush_row()
        if self.val_images is not None and (not t.val_every or self.done()) and not self.ledger.validated():
            self.checkpoint()  # first: a crash in validation loses nothing
            self.validate()
        scores = self.ledger.scores()
        row = self.metrics.end_epoch(
            p.epoch,
            p.step,
            {
                "psnr": scores.get("psnr"),
                "ssim": scores.get("ssim"),
                "seconds": round(time.perf_counter() - started, 3),
                # epochs.csv has the chosen ones
                **{name: scores.get(name) for name in metric_columns(OPTIONAL_METRICS)},
            },
            finished=complete,
        )
        summary = describe(p.epoch, self.epochs(), row)
        if scores:
            summary += " " + describe_scores({k: v for k, v in scores.items() if k not in ("step", "best")})
        log.info("%s (%.1f s)", summary, row["seconds"])
        self.ledger.close_epoch()
        self.checkpoint(best=bool(scores.get("best")), keep_epoch=complete and p.epoch % t.checkpoint_every == 0)
        if self.world.is_main:
            if self.sheet is not None:
                picture = self.sheet.write(
                    self.generator_to_score(), self.runtime, self.folder.path / "samples" / f"epoch_{p.epoch:03d}.png"
                )
                if self.tensorboard:
                    self.tensorboard.image("samples", picture, p.step)
            if self.draws_curves:
                self.draws_curves = redraw_curves(self.folder.path, t.best_by)
        if complete:
            self.ledger.next_epoch()

    # ---- validation and checkpoints ------------------------------------------------

    def validate(self) -> None:
        """Score the generator (its EMA when kept) on the validation set and
        write validation.csv's row."""
        p = self.progress
        assert self.val_images is not None  # as validation_due() and end_epoch() check
        self.world.sync_buffers(self.parts.generator)  # the ranks' BatchNorm statistics, averaged
        # each rank scores its share of the images; the means are over all of them
        sums, count = validate(
            self.generator_to_score(),
            self.val_images,
            self.runtime,
            self.scores,
            self.world.shard(len(self.val_images)),
        )
        totals = self.world.total(
            torch.tensor([*sums, count], dtype=torch.float64, device=self.runtime.device)
        ).tolist()
        means = {name: total / totals[-1] for name, total in zip(self.scores.columns, totals, strict=False)}
        best_by = self.config.train.best_by
        undefined = [name for name, value in means.items() if not math.isfinite(value)]
        if undefined:  # a NaN never becomes the best (it beats nothing); a later finite value still can
            log.warning(
                "step %d: validation %s %s (NaN or infinite: the generator's output, or a learned metric's "
                "network, overflowed)%s",
                p.step,
                ", ".join(undefined),
                "is not a number" if len(undefined) == 1 else "are not numbers",
                f"; not a candidate for best.pt by {best_by}" if best_by in undefined else "",
            )
        improved = better(best_by, means[best_by], p.best_value)
        if improved:
            p.best_value, p.best_step = means[best_by], p.step
        bicubic = {f"bicubic_{name}": value for name, value in self.bicubic.items()}
        self.metrics.validation({"epoch": p.epoch, "step": p.step, **means, **bicubic})
        self.ledger.record_validation(means, improved)

    def validate_and_checkpoint(self) -> None:
        self.checkpoint()  # first: a crash in validation loses nothing
        self.validate()
        self.checkpoint(best=self.ledger.scores()["best"])

    def checkpoint(self, best: bool = False, keep_epoch: bool = False) -> None:
        """Write checkpoints/last.pt (and best.pt, epoch_NNN.pt) as the run
        stands, the metric log flushed first. Raises NonFiniteLoss instead of
        saving weights that are no longer finite, so the last good checkpoint
        stays."""
        p = self.progress
        self.metrics.flush(p.epoch, {})
        networks = {"generator": self.parts.generator, "discriminator": self.parts.discriminator}
        for name, module in networks.items():
            if not all(bool(torch.isfinite(w).all()) for w in module.parameters()):
                raise NonFiniteLoss(
                    f"step {p.step}: the {name}'s weights are no longer finite; stopping, the last "
                    "checkpoint is kept (a lower learning rate may help)"
                )
            self.world.sync_buffers(module)
        self.world.check_in_sync(networks, self.runtime.device)
        if not self.world.is_main:
            return
        p.metric_state = self.metrics.state()
        state = checkpoint_state(self.parts, self.ema, self.config, p)
        targets = [self.folder.last]
        if best:
            targets.append(self.folder.checkpoints / "best.pt")
        if keep_epoch:
            targets.append(self.folder.checkpoints / f"epoch_{p.epoch:03d}.pt")
        for path in targets:
            save_checkpoint(path, state)
        self.record("running")

    def save_pretrained(self) -> None:
        """Write checkpoints/pretrained.pt, the generator at the end of the PSNR
        phase, once, at the step that ends it (a resume from before that step
        reaches it again and writes the same bits)."""
        self.world.sync_buffers(self.parts.generator)  # every rank: a collective under DDP
        if self.world.is_main:
            state = pretrained_state(self.parts, self.ema, self.config, self.progress.step)
            save_checkpoint(self.folder.checkpoints / PRETRAINED_NAME, state)

    def generator_to_score(self) -> SRGenerator:
        """What validation, the pictures and upscaling use: the EMA weights when kept."""
        generator = self.ema.model if self.ema else unwrap(self.parts.generator)
        assert isinstance(generator, SRGenerator)  # the EMA's copy or the network itself
        return generator

    def stop_requested(self, stop: StopSignals, row_due: bool) -> int:
        """The signal to stop on (0: none). With several ranks they must stop
        at the same step: they agree at each logged row, where they meet
        anyway, so a signal that reached some ranks only (or at different
        steps) stops all of them a few steps later, together."""
        if not self.world.distributed:
            return stop.signum or 0
        if not row_due:
            return 0
        return int(self.world.maximum(float(stop.signum or 0), self.runtime.device))

    def record(self, state: str, reason: str = "") -> None:
        """run.json: the state, step and time spent, for `srgan runs`. A
        failed write raises only while the run is "running": when recording
        how a run ended, a full disk here must not hide the error that ended it."""
        started, before = self._session
        self.progress.wall_seconds = before + time.perf_counter() - started
        if not self.world.is_main:
            return
        try:
            self.folder.write_status(
                state,
                self.progress.step,
                self.planned_steps(),
                self.progress.wall_seconds,
                reason,
                extra={
                    "precision": self.precision.record(),
                    "micro_batch": {
                        **self.plan.record(),
                        "micro_batch": self.progress.micro_batch,
                        "accumulate": self.parts.accumulate,
                    },
                    "micro_batch_changes": self.progress.micro_batch_changes,
                },
            )
        except SrganError:
            if state == "running":
                raise

    def epochs(self) -> int:
        """The epochs the run will reach: train.epochs, or fewer when train.max_steps ends it first."""
        t = self.config.train
        return min(t.epochs, -(-t.max_steps // self.sampler.steps_per_epoch)) if t.max_steps else t.epochs

    def planned_steps(self) -> int:
        t = self.config.train
        planned = t.epochs * self.sampler.steps_per_epoch
        return min(planned, t.max_steps) if t.max_steps else planned

    def interrupt(self, signum: int) -> None:
        self.checkpoint()
        raise TrainingInterrupted(
            signum,
            f"stopped at step {self.progress.step}; {self.folder.last} is saved. "
            f"Resume with: srgan train --resume {self.folder.path}",
        )

    # ---- where the run stands ----------------------------------------------------

    def done(self) -> bool:
        max_steps = self.config.train.max_steps
        return bool(max_steps) and self.progress.step >= max_steps

    def validation_due(self) -> bool:
        every = self.config.train.val_every
        return self.val_images is not None and bool(every) and self.progress.step % every == 0

    def close(self) -> None:
        shutdown_workers(self.loader)
        tensorboard = getattr(self, "tensorboard", None)  # absent when __init__ failed before it
        if tensorboard:
            tensorboard.close()
        detach_log_file()
        self.folder.close()


@dataclass
class Ledger:
    """Where the run stands in its data and which work of its current step
    is done, kept in Progress (so in every checkpoint) for a resumed run to
    do exactly what the uninterrupted one did: no step twice, no validation
    or epoch end skipped or repeated. Its counters:

    - `epoch_keys`: the keys of the epoch's data order consumed (a step takes
      batch_size x ranks); in keys, not steps, so that a run resumes on
      another number of ranks. The epoch is complete when the next step's
      keys no longer fit in it.
    - `validated_step`: the last step whose validation is done.
    - `closed_step`: the last step whose epoch end (its validation, epochs.csv
      row, checkpoints, pictures) is done.
    - `last_validation`: the means of the validation at `validated_step`,
      with its step and `best` (whether it improved on the best before).

    The trainer writes a checkpoint just before a validation or an epoch's
    end, so that a crash in them loses nothing: its counters then say the
    work is still to do, and the resumed run does it first."""

    progress: Progress
    sampler: EpochSampler

    def start_epoch(self) -> None:
        """Point the sampler at the epoch's data order, past the keys already consumed."""
        self.sampler.set_epoch(self.progress.epoch, skip_keys=self.progress.epoch_keys)

    def took_step(self) -> None:
        self.progress.step += 1
        self.progress.epoch_keys += self.sampler.global_batch

    def epoch_complete(self) -> bool:
        return self.progress.epoch_keys + self.sampler.global_batch > self.sampler.keys_per_epoch

    def next_epoch(self) -> None:
        self.progress.epoch, self.progress.epoch_keys = self.progress.epoch + 1, 0

    def validated(self) -> bool:
        """Whether the current step's validation is done."""
        return self.progress.validated_step == self.progress.step

    def record_validation(self, means: dict[str, float], improved: bool) -> None:
        p = self.progress
        p.validated_step = p.step
        p.last_validation = {"step": p.step, **means, "best": improved}

    def scores(self) -> dict:
        """The current step's validation (its means and `best`), or {} when it had none."""
        last = self.progress.last_validation
        return last if last.get("step") == self.progress.step else {}

    def close_epoch(self) -> None:
        """Mark the current step's epoch end done (before the checkpoint that records it)."""
        self.progress.closed_step = self.progress.step

    def epoch_end_pending(self, done: bool) -> bool:
        """Whether the current step owes an epoch end: its epoch is complete
        but not closed, or the run is `done` inside an epoch (whose end a
        resumed run writes again, its row cut from the logs by resume_logs)."""
        complete = self.epoch_complete()
        return (complete and self.progress.closed_step != self.progress.step) or (done and not complete)

    def resume_logs(self, metrics: MetricLog) -> None:
        """Cut the run's logs back to the checkpoint: its closed epochs kept,
        the rows of work still to do dropped (they are written again); past
        a closed epoch's end, the next epoch is the one under way."""
        p = self.progress
        closed = self.epoch_complete() and p.closed_step == p.step
        metrics.resume(
            p.metric_state,
            p.step,
            keep_epochs_before=p.epoch + 1 if closed else p.epoch,
            validated=self.validated(),
        )
        if closed:
            self.next_epoch()


def choose_precision(runtime: Runtime, config: Config, resume: Path | None, world: World) -> PrecisionChoice:
    """The run's precision and how it was chosen: the given one; for auto,
    a resumed run's own, as its run.json records it (a resume stays
    bit-exact, whatever the cache says now), else rank 0's timing of the
    step (models/precision_choice.py), which every rank then runs in."""
    if not runtime.measure:
        return PrecisionChoice(runtime.precision, "given", {}, "a step")
    if resume is not None and RunFolder(Path(resume)).has_checkpoint():
        return recorded_precision(Path(resume), runtime.device)
    return world.run_on_main(lambda: measure_training(runtime, config))  # a refusal stops every rank


def micro_batch_of(trainer: Trainer | None) -> str:
    """The micro-batch the trainer's steps take, for a message ("?" before it was planned)."""
    progress = getattr(trainer, "progress", None)
    return str(progress.micro_batch) if progress is not None and progress.micro_batch else "?"


def batches(loader: DataLoader):
    """The loader's batches; an SrganError raised in a worker process comes
    back wrapped with the worker's traceback: unwrap it to its message."""
    try:
        yield from loader
    except SrganError as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        if len(lines) > 1 and "Traceback" in str(error):
            raise SrganError(lines[-1].split("SrganError: ", 1)[-1]) from None
        raise


def shutdown_workers(loader: DataLoader) -> None:
    """Stop the DataLoader's persistent worker processes now. They ignore
    SIGTERM (see signals.py), so the exit handler of multiprocessing, which
    terminates children with SIGTERM, would wait for them forever."""
    # private: DataLoader has no public close() for persistent workers (pytorch/pytorch#71383)
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()  # what the iterator's own __del__ calls
    loader._iterator = None


def build_parts(config: Config, runtime: Runtime) -> TrainingParts:
    """The networks, the criterion and the optimizers a step needs, on the device."""
    t = config.train
    generator = runtime.place(build_generator(config.model))
    if isinstance(generator, SpandrelGenerator):
        check_crop(config, generator)  # the crop and batch its training forward takes
    discriminator = runtime.place(build_discriminator(config))
    criterion = runtime.place(GeneratorCriterion(config.loss, config.gan.d_loss))
    if t.compile:
        # In place, so state_dict keys stay those of the plain modules. Static
        # shapes: a run's crop is fixed, and a second shape in one process (a
        # sweep's next variant) would otherwise recompile with symbolic sizes,
        # which inductor fails on for spandrel's window transformers on the
        # CPU (docs/models.md).
        generator.compile(dynamic=False)
        discriminator.compile(dynamic=False)
        if criterion.vgg is not None:
            criterion.vgg.compile(dynamic=False)
    # fused: one kernel for all parameters (CPU and CUDA, PyTorch >= 2.4)
    betas, fused = (t.betas[0], t.betas[1]), runtime.device.type in ("cpu", "cuda")  # two betas: the loader checks
    return TrainingParts(
        generator=generator,
        discriminator=discriminator,
        criterion=criterion,
        optimizer_g=torch.optim.Adam(generator.parameters(), lr=t.lr_g, betas=betas, fused=fused),
        optimizer_d=torch.optim.Adam(discriminator.parameters(), lr=t.lr_d, betas=betas, fused=fused),
        scaler=torch.amp.GradScaler(runtime.device.type, enabled=runtime.precision == "fp16"),
        runtime=runtime,
        d_loss=config.gan.d_loss,
        update=config.gan.update,
        accumulate=config.train.accumulate,
        grad_clip=t.grad_clip,
        r1=config.gan.r1,
        r1_every=config.gan.r1_every,
        warmup_steps=config.gan.warmup_steps,
    )


def default_run_dir(config: Config) -> Path:
    """runs/<name>-<timestamp>, made unique when two runs start in the same second."""
    base = Path("runs") / f"{config.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def describe(epoch: int, epochs: int, row: dict) -> str:
    """The progress bar's text: [epoch/epochs] d_loss g_loss d_score g_score,
    then the artefact and colour terms a run weights (ldl ffl ms_ssim colour luma)
    and, with train.grad_clip, the gradient norms."""
    # the artefact and colour terms when weighted, the gradient norms with train.grad_clip
    names = ("d_loss", "g_loss", "d_score", "g_score", *ARTEFACT_TERMS, "g_grad_norm", "d_grad_norm")
    shown = [f"{name} {row[name]:.4f}" for name in names if name in row]
    return f"[{epoch}/{epochs}] " + " ".join(shown)


def set_learning_rates(parts: TrainingParts, t: TrainConfig, step: int) -> None:
    """The rates for `step` (1-based), derived from the step alone (so
    resuming needs no state): the base rates, times gamma for every milestone
    passed, times the warm-up ramp, times the cosine of the generator-only
    phase when the schedule is cosine."""
    lrs = t.lr_schedule
    factor = lrs.gamma ** sum(step > m for m in lrs.milestones)
    if lrs.warmup_steps and step <= lrs.warmup_steps:
        factor *= step / lrs.warmup_steps
    span = t.pretrain_steps or t.max_steps
    if lrs.kind == "cosine" and step <= span:
        progress = max(0, step - lrs.warmup_steps) / max(1, span - lrs.warmup_steps)
        factor *= lrs.min_factor + (1 - lrs.min_factor) * (1 + math.cos(math.pi * progress)) / 2
    for optimizer, base in ((parts.optimizer_g, t.lr_g), (parts.optimizer_d, t.lr_d)):
        for group in optimizer.param_groups:
            group["lr"] = base * factor


def redraw_curves(run_dir: Path, metric: str = "psnr") -> bool:
    """Draw the run's curves.png again. Returns False, having said why, where
    matplotlib is not installed: the caller then stops asking."""
    try:
        draw_curves([run_dir], run_dir / "curves.png", metric=metric)
    except ImportError:
        log.warning("curves.png needs matplotlib: pip install 'srgan[plot]'")
        return False
    return True


def describe_scores(scores: dict[str, float]) -> str:
    """`psnr 28.12 ssim 0.7812 lpips 0.2345 ciede2000 2.31 ciede2000_p99 7.80 shift_a +0.12 shift_b -0.40`:
    a validation's means, for the log (the shifts signed: which way the colour went)."""
    return " ".join(f"{name} {format(value, _LOG_FORMATS.get(name, '.4f'))}" for name, value in scores.items())


_LOG_FORMATS = {"psnr": ".2f", "ciede2000": ".2f", "ciede2000_p99": ".2f", "shift_a": "+.2f", "shift_b": "+.2f"}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def count_parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def attach_log_file(path: Path) -> None:
    """Copy the run's messages (settings, warnings, epoch summaries) to train.log."""
    detach_log_file()
    try:
        handler = QuietFileHandler(path, encoding="utf-8")
    except OSError as error:
        if error.errno in FULL_DISK_ERRNOS:
            raise DiskFull(f"disk full at {path} ({error.strerror})") from None
        raise
    handler.srgan_run_log = True
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger("srgan").addHandler(handler)


def detach_log_file() -> None:
    logger = logging.getLogger("srgan")
    for handler in list(logger.handlers):
        if getattr(handler, "srgan_run_log", False):
            logger.removeHandler(handler)
            handler.close()
