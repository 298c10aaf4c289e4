"""train.micro_batch: planned from the memory at hand before the first step
(a child process under RLIMIT_AS), halved after an out-of-memory error in a
step (the allocator's error raised from inside a network's forward), kept on
resume, agreed by the ranks under DDP; the bits equal those of the run that
named the micro-batch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import set_args
from conftest import tiny_overrides as pinned_overrides
from srgan.configs import load_config
from srgan.files.errors import SrganError
from srgan.training import train
from srgan.training.loop import Trainer
from srgan.training.micro_batch import smaller_micro_batch
from srgan.training.signals import StopSignals
from srgan.training.state import load_checkpoint

OOM_TEXT = "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 B"


def assert_same_bits(a: Path, b: Path) -> None:
    """Every tensor of the two runs' last.pt equal (weights, moments, RNG)."""
    first, second = load_checkpoint(a / "checkpoints" / "last.pt"), load_checkpoint(b / "checkpoints" / "last.pt")

    def walk(x, y, where):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y), where
        elif isinstance(x, dict):
            for key in ("generator", "discriminator", "optimizer_g", "optimizer_d", "rng", "state"):
                if key in x:
                    walk(x[key], y[key], f"{where}.{key}")
            if where.endswith(("generator", "discriminator", "state")) or ".state." in where:
                for key in x:
                    walk(x[key], y[key], f"{where}.{key}")
        elif isinstance(x, (list, tuple)):
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{where}[{i}]")

    walk(first, second, "last.pt")
    assert first["step"] == second["step"]


def run_json(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


class RunsOutOfMemory:
    """A forward pre-hook: the CPU allocator's error when a forward gets more
    than `most` crops during step `step` (every step when 0), as a network too
    big for the memory at hand raises it."""

    def __init__(self, trainer: Trainer, most: int, step: int = 0, only_in_g_update: bool = False):
        self.trainer, self.most, self.step, self.only_in_g_update = trainer, most, step, only_in_g_update
        self.raised = 0

    def __call__(self, module, inputs):
        at = self.trainer.progress.step + 1
        in_g_update = not any(p.requires_grad for p in self.trainer.parts.discriminator.parameters())
        if self.only_in_g_update and not in_g_update:
            return
        if inputs[0].shape[0] > self.most and (self.step in (0, at)) and module.training:
            self.raised += 1
            raise RuntimeError(OOM_TEXT)


def train_with_oom(config, most: int, step: int = 0, on: str = "generator", **hook) -> tuple[Path, RunsOutOfMemory]:
    """train(config) with the allocator's error raised in `on`'s forward (see RunsOutOfMemory)."""
    trainer = Trainer(config)
    raiser = RunsOutOfMemory(trainer, most, step, **hook)
    getattr(trainer.parts, on).register_forward_pre_hook(raiser)
    try:
        with StopSignals() as stop:
            trainer.fit(stop)
    finally:
        trainer.close()
    return trainer.folder.path, raiser


def tiny_overrides(train_dir: Path, run_dir: Path, *extra: str) -> list[str]:
    """conftest's, with train.micro_batch left auto: the plan is the subject
    here (an extra that pins it still wins)."""
    return pinned_overrides(train_dir, run_dir, "train.micro_batch=auto", *extra)


def tiny(photo_dir, run: Path, *extra: str):
    return load_config("demo", tiny_overrides(photo_dir, run, "data.batch_size=4", "data.repeat=4", *extra))


# ---- the config ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "culprit"),
    [
        (["train.micro_batch=3"], "train.micro_batch: expected auto or a divisor of data.batch_size (4)"),
        (["train.micro_batch=0"], "train.micro_batch: expected auto or at least 1"),
        (["train.micro_batch=two"], "train.micro_batch: expected an integer or one of auto, got 'two'"),
        (["train.micro_batch=2", "train.accumulate=4"], "train.accumulate: expected 1 or 2 with train.micro_batch 2"),
    ],
)
def test_micro_batch_settings_that_do_not_split_the_batch_are_refused(photo_dir, tmp_path, settings, culprit):
    with pytest.raises(SrganError, match=culprit.replace("(", r"\(").replace(")", r"\)")):
        tiny(photo_dir, tmp_path / "run", *settings)


def test_accumulate_and_micro_batch_that_agree_are_one_plan(photo_dir, tmp_path):
    from srgan.training.micro_batch import pinned_micro_batch

    assert pinned_micro_batch(tiny(photo_dir, tmp_path, "train.micro_batch=2", "train.accumulate=2")) == 2
    assert pinned_micro_batch(tiny(photo_dir, tmp_path, "train.accumulate=4")) == 1
    assert pinned_micro_batch(tiny(photo_dir, tmp_path)) is None  # auto: measured


# ---- planned at start-up --------------------------------------------------------------


def test_a_planned_micro_batch_changes_no_bit_of_the_run(photo_dir, tmp_path, caplog):
    """auto with room for the whole batch: the trial steps run on copies with
    the RNG restored, so the run equals the run pinned to the whole batch."""
    with caplog.at_level(logging.INFO, logger="srgan"):
        auto = train(tiny(photo_dir, tmp_path / "auto"))
    pinned = train(tiny(photo_dir, tmp_path / "pinned", "train.micro_batch=4"))
    plan = run_json(auto)["micro_batch"]
    assert plan["micro_batch"] == 4 and plan["accumulate"] == 1 and plan["how"] == "measured"
    assert 0 < plan["peak_bytes"] < plan["available_bytes"]
    assert any(r.getMessage().startswith("micro-batch 4 x 1 (peak ") for r in caplog.records)
    assert_same_bits(auto, pinned)


LIMITED = """
import logging, resource, sys
logging.basicConfig(level=logging.INFO)
from pathlib import Path
sys.path.insert(0, {tests!r})
from conftest import tiny_overrides
from srgan.models.memory import status_bytes
from srgan.configs import load_config
from srgan.training import train
resource.setrlimit(resource.RLIMIT_AS, (status_bytes("VmSize") + {budget}, resource.RLIM_INFINITY))
train(load_config("demo", tiny_overrides(Path({photos!r}), Path({run!r}), "train.micro_batch=auto", *{extra!r})))
"""
# 8 crops of 128 px a step: the whole batch's step takes about 0.33 GiB at its
# peak here, 4 crops' about 0.18 (docs/training.md "Memory"); the child may
# grow its address space by this much beyond what it holds after its imports.
BIG = ["data.crop_size=128", "data.batch_size=8", "data.repeat=6", "train.max_steps=1"]
BUDGET = 370 * 2**20


def test_a_batch_too_big_for_the_memory_at_hand_runs_in_micro_batches_with_the_same_bits(photo_dir, tmp_path):
    run = tmp_path / "limited"
    script = LIMITED.format(
        tests=str(Path(__file__).parent), budget=BUDGET, photos=str(photo_dir), run=str(run), extra=BIG
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plan = run_json(run)["micro_batch"]
    assert plan["how"] == "measured" and plan["micro_batch"] in (2, 4), plan  # the whole batch does not fit
    assert plan["available_bytes"] < BUDGET
    assert f"micro-batch {plan['micro_batch']} x {8 // plan['micro_batch']} (peak" in done.stderr
    assert run_json(run)["micro_batch_changes"] == []  # planned, not found by running out
    pinned = f"train.micro_batch={plan['micro_batch']}"
    reference = train(load_config("demo", tiny_overrides(photo_dir, tmp_path / "ref", *BIG, pinned)))
    assert_same_bits(run, reference)


def test_a_crop_whose_one_sample_does_not_fit_is_refused_before_any_file(photo_dir, tmp_path, monkeypatch):
    """A fit of 10 MiB + 40 MiB a crop at 64 px against 20 MiB planned: the
    refusal names the crop, the memory and the crop of a quarter the pixels
    (32 px), and no run folder is made. (The CPU's measured figures vary by
    run: the fit is set here, its measurement is tested above.)"""
    from srgan.training import micro_batch

    mib = 2**20
    monkeypatch.setattr(micro_batch, "fit_peak", lambda parts, config, gan, crop, most: (10.0 * mib, 40.0 * mib))
    monkeypatch.setattr(micro_batch, "available_bytes", lambda device: int(20 * mib / micro_batch.MARGIN) + 1)
    with pytest.raises(SrganError, match=r"data.crop_size 64: one crop's training step does not fit") as refused:
        train(tiny(photo_dir, tmp_path / "run", "data.crop_size=64"))
    message = str(refused.value)
    assert "GiB on cpu" in message and "(its peak: about 0.05 GiB)" in message, message
    assert message.endswith("the largest crop that fits is about 32 px"), message
    assert not (tmp_path / "run").exists()


# ---- out of memory mid-run -------------------------------------------------------


def test_an_out_of_memory_error_at_the_first_step_halves_the_micro_batch_with_the_same_bits(
    photo_dir, tmp_path, caplog
):
    with caplog.at_level(logging.WARNING, logger="srgan"):
        run, raiser = train_with_oom(tiny(photo_dir, tmp_path / "oom"), most=2, step=1)
    assert raiser.raised == 1
    status = run_json(run)
    assert status["state"] == "finished" and status["step"] == 2
    assert status["micro_batch_changes"] == [{"step": 1, "micro_batch": 2}]
    assert status["micro_batch"]["micro_batch"] == 2 and status["micro_batch"]["accumulate"] == 2
    lines = [r.getMessage() for r in caplog.records if "out of memory" in r.getMessage()]
    assert len(lines) == 1 and "step 1: out of memory at micro-batch 4" in lines[0] and "micro-batch 2 x 2" in lines[0]
    assert_same_bits(run, train(tiny(photo_dir, tmp_path / "pinned", "train.micro_batch=2")))


def test_an_out_of_memory_error_at_a_later_step_equals_a_resume_at_the_smaller_micro_batch(photo_dir, tmp_path):
    """Step 1 at 4 crops, step 2 halved to 2 after its error: the run that took
    step 1 at 4 and resumed pinned to 2. (A run pinned to 2 from the start
    differs: its step 1 took D's BatchNorm statistics over 2 crops.)"""
    run, _ = train_with_oom(tiny(photo_dir, tmp_path / "oom"), most=2, step=2)
    assert run_json(run)["micro_batch_changes"] == [{"step": 2, "micro_batch": 2}]
    first = train(tiny(photo_dir, tmp_path / "ref", "train.max_steps=1", "train.micro_batch=4"))
    resumed = train(tiny(photo_dir, first, "train.micro_batch=2"), resume=first)
    assert_same_bits(run, resumed)
    # and resuming the recovered run keeps its micro-batch
    assert load_checkpoint(run / "checkpoints" / "last.pt")["micro_batch"] == 2


def test_an_error_in_the_generator_update_does_not_repeat_the_discriminator_update(photo_dir, tmp_path):
    """Out of memory in G's half of the GAN step (D already updated): G's half
    alone runs again, so D took one update on the batch, as at 4 crops."""
    config = tiny(photo_dir, tmp_path / "oom", "train.max_steps=1")
    run, raiser = train_with_oom(config, most=2, step=1, on="discriminator", only_in_g_update=True)
    assert raiser.raised >= 1
    whole = train(tiny(photo_dir, tmp_path / "whole", "train.max_steps=1", "train.micro_batch=4"))
    d_run = load_checkpoint(run / "checkpoints" / "last.pt")
    d_whole = load_checkpoint(whole / "checkpoints" / "last.pt")
    # D's weights (its BatchNorm running statistics also see G's half, which ran at 2 crops)
    weights = [key for key in d_whole["discriminator"] if not key.endswith(("running_mean", "running_var", "tracked"))]
    assert len(weights) > 4
    for key in weights:
        assert torch.equal(d_run["discriminator"][key], d_whole["discriminator"][key]), key
    for index, moments in d_whole["optimizer_d"]["state"].items():
        assert torch.equal(d_run["optimizer_d"]["state"][index]["exp_avg"], moments["exp_avg"]), index
    assert d_run["optimizer_d"]["state"][0]["step"] == 1  # one Adam step, not two


def test_out_of_memory_at_micro_batch_one_ends_the_run_with_last_pt_kept(photo_dir, tmp_path, srgan, monkeypatch):
    run = tmp_path / "run"
    overrides = tiny_overrides(photo_dir, run, "data.batch_size=2", "train.save_every=1")
    import srgan.training.loop as loop

    planned = loop.Trainer.plan_micro_batch

    def plan_micro_batch(self):
        plan = planned(self)  # the trial steps on copies first, without the error
        self.parts.generator.register_forward_pre_hook(RunsOutOfMemory(self, most=0, step=2))
        return plan

    monkeypatch.setattr(loop.Trainer, "plan_micro_batch", plan_micro_batch)
    result = srgan("train", "--config", "demo", *set_args(overrides))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "out of memory" in last and "micro-batch 1" in last, last
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 1
    assert run_json(run)["state"] == "failed"
    assert [c["micro_batch"] for c in run_json(run)["micro_batch_changes"]] == [1]


def test_one_trial_plans_the_whole_batch_when_its_bound_fits(photo_dir, tmp_path, monkeypatch):
    """A step's peak a + b x crops (a >= 0) is at most peak(1 crop) x batch:
    with room for that, one trial step plans the whole batch (the planning's
    cost at start-up); with less, a line through trials on 1 and 2 crops
    decides, and may still find that the whole batch fits. Trial peaks here
    are 100 MiB + 50 MiB a crop (the real trials: the tests above)."""
    from srgan.training import micro_batch

    mib, trials = 2**20, []

    def trial_peak(parts, config, gan, crop, samples, base):
        trials.append(samples)
        return (100 + 50 * samples) * mib

    monkeypatch.setattr(micro_batch, "trial_peak", trial_peak)
    for room_mib, expected_trials, peak_mib in ((610, [1], 600), (500, [1, 1, 2], 300), (250, [1, 1, 2], 200)):
        trials.clear()
        monkeypatch.setattr(micro_batch, "available_bytes", lambda device, r=room_mib: r * mib / micro_batch.MARGIN)
        trainer = Trainer(tiny(photo_dir, tmp_path / str(room_mib)))
        trainer.close()
        assert trials == expected_trials, room_mib
        assert trainer.plan.micro_batch == {610: 4, 500: 4, 250: 2}[room_mib]
        assert trainer.plan.peak == peak_mib * mib  # the bound when one trial decided, else the line's


def test_a_trial_frees_its_copies_with_no_full_collection_unless_a_cycle_holds_one(photo_dir, tmp_path, monkeypatch):
    """Reference counting frees a trial's copies of the networks; a full
    gc.collect (0.15 s with torch loaded, half the demo's planning) runs only
    when a reference cycle keeps one alive, which the run's first step would
    otherwise find in memory beside its own."""
    import gc

    from srgan.training import micro_batch

    trainer = Trainer(tiny(photo_dir, tmp_path / "run"))
    trainer.close()
    parts, config = trainer.parts, trainer.config
    discriminators = lambda: sum(type(o) is type(parts.discriminator) for o in gc.get_objects())  # noqa: E731
    gc.collect()  # earlier tests' garbage, which the trial's own collection would otherwise count off
    collections, collect = [], gc.collect
    monkeypatch.setattr(gc, "collect", lambda *generation: collections.append(generation) or collect(*generation))
    gc.disable()  # no automatic collection: only the trial's own
    try:
        count = discriminators()
        assert micro_batch.trial_peak(parts, config, True, 32, 1, None) > 0
        assert collections == [] and discriminators() == count  # freed, without a collection
        parts.discriminator.loop = [parts.discriminator]  # a cycle: the copy has one too
        micro_batch.trial_peak(parts, config, True, 32, 1, None)
        assert collections == [()] and discriminators() == count  # collected
    finally:
        del parts.discriminator.loop
        gc.enable()


# ---- DDP --------------------------------------------------------------------------

RANK_WITH_LESS = """
import os, sys
from srgan.training import micro_batch
if os.environ["RANK"] == "1":  # this rank's trial steps say only 1 crop's step fits its memory
    micro_batch.available_bytes = lambda device: 1.5 * 2**30
    per_crop = 2**30 * micro_batch.MARGIN  # fit_peak's (a, b): one trial gives its peak as a
    micro_batch.fit_peak = lambda parts, config, gan, crop, counts: (
        (0.0, per_crop) if len(counts) > 1 else (per_crop * counts[0], 0.0)
    )
from srgan.cli.app import main
sys.argv[0] = "srgan"
main()
"""


def test_the_ranks_agree_on_the_smallest_micro_batch(photo_dir, tmp_path):
    script = tmp_path / "rank_with_less.py"
    script.write_text(RANK_WITH_LESS)
    run = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
        + ["train", *set_args(tiny_overrides(photo_dir, run, "data.batch_size=2", "train.max_steps=1"))],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    plan = run_json(run)["micro_batch"]  # rank 0 alone had room for its 2 crops
    assert plan["micro_batch"] == 1 and plan["accumulate"] == 2 and plan["how"] == "the ranks' smallest", plan
    assert "micro-batch 1 x 2 (the ranks' smallest)" in done.stderr
    assert load_checkpoint(run / "checkpoints" / "last.pt")["micro_batch"] == 1


RANK_OUT_OF_MEMORY_AT_STEP_4 = """
import os, sys
from srgan.training.loop import Trainer
run_step = Trainer.run_step
def failing(self, lr, hr, done):  # rank 1 alone: the allocator's error in step 4's update
    if os.environ["RANK"] == "1" and self.progress.step + 1 == 4:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
    return run_step(self, lr, hr, done)
Trainer.run_step = failing
from srgan.cli.app import main
sys.argv[0] = "srgan"
main()
"""


def test_out_of_memory_mid_run_on_one_rank_stops_every_rank_with_the_micro_batch_to_resume_with(photo_dir, tmp_path):
    """The other rank is inside the step's collectives and cannot halve with
    it (docs/training.md): the run stops at once, not at the process group's
    timeout, the failing rank names the micro-batch to resume with, and the
    last checkpoint (step 3) is kept."""
    script = tmp_path / "rank_out_of_memory.py"
    script.write_text(RANK_OUT_OF_MEMORY_AT_STEP_4)
    run = tmp_path / "run"
    steps = ("data.batch_size=2", "data.repeat=8", "train.max_steps=6", "train.save_every=1")
    overrides = tiny_overrides(photo_dir, run, *steps)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
        + ["train", *set_args([*overrides, "train.micro_batch=2", "train.dist_timeout_s=600"])],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # far below the 600 s timeout: the broken group is seen at once
    )
    assert done.returncode != 0
    assert (
        "rank 1: out of memory at step 4 (RuntimeError: DefaultCPUAllocator: can't allocate memory" in done.stderr
        and "resume with --set train.micro_batch=1 (the last checkpoint is kept)" in done.stderr
    ), done.stderr[-3000:]
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 3
    assert run_json(run)["state"] == "failed"


def test_the_micro_batch_never_drops_below_what_the_network_trains_on():
    """DAT's BatchNorm needs 2 samples: halving 4 stops at 2, and from 2 there is nothing smaller."""
    assert smaller_micro_batch(12, 12, 1) == 6 and smaller_micro_batch(12, 6, 1) == 3
    assert smaller_micro_batch(12, 3, 1) == 1 and smaller_micro_batch(12, 1, 1) is None
    assert smaller_micro_batch(4, 4, 2) == 2 and smaller_micro_batch(4, 2, 2) is None
    assert smaller_micro_batch(6, 6, 4) is None  # no divisor of 6 from 4 to 3
