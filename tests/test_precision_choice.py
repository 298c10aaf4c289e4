"""`precision: auto` chosen by timing the work on this machine
(models/precision_choice.py): the choice follows the timings, they are
cached by machine, torch and work, a damaged cache is ignored, and a
resumed run keeps the precision it started in, bit for bit."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from conftest import tiny_overrides
from srgan.configs import load_config
from srgan.models import Generator, resolve_runtime
from srgan.models import precision_choice as pc
from srgan.training import train
from test_reproducibility import assert_same_checkpoints

pytestmark = pytest.mark.own_cache  # its tests lay out and damage the cache folder themselves

CPU_AUTO = resolve_runtime("cpu", "auto", False)


def tiny_generator() -> Generator:
    return Generator(2, blocks=1, channels=8).eval()


def plant(cache, fp32: float, bf16: float) -> None:
    """Every entry of the cache file says these seconds."""
    data = json.loads(cache.read_text())
    for entry in data["timings"].values():
        entry["seconds"] = {"fp32": fp32, "bf16": bf16}
    cache.write_text(json.dumps(data))


@pytest.fixture
def precision_cache(tile_pad_cache):
    """This test's own precision cache (conftest's $XDG_CACHE_HOME), and bf16 a candidate here."""
    if pc.candidates(torch.device("cpu"), tiny_generator()) == ["fp32"]:
        pytest.skip("this CPU runs no bf16: fp32 is the only candidate")
    return tile_pad_cache.parent / "precision.json"


def test_auto_times_both_caches_them_and_follows_the_timings(precision_cache):
    g = tiny_generator()
    first = pc.for_inference(CPU_AUTO, g)
    assert not first.measure and first.precision in ("fp32", "bf16")
    assert first.chosen.startswith(f"precision auto: {first.precision} (") and first.chosen.endswith(
        " a tile, measured)"
    )
    entry = next(iter(json.loads(precision_cache.read_text())["timings"].values()))
    assert set(entry["seconds"]) == {"fp32", "bf16"} and all(s > 0 for s in entry["seconds"].values())
    assert entry["torch"] == torch.__version__ and entry["work"] == "upscale"
    plant(precision_cache, fp32=0.010, bf16=0.020)
    slow_bf16 = pc.for_inference(CPU_AUTO, g)
    assert slow_bf16.precision == "fp32"
    assert slow_bf16.chosen == "precision auto: fp32 (fp32 10 ms, bf16 20 ms a tile, cached)"
    plant(precision_cache, fp32=0.067, bf16=0.041)
    assert pc.for_inference(CPU_AUTO, g).chosen == "precision auto: bf16 (bf16 41 ms, fp32 67 ms a tile, cached)"
    plant(precision_cache, fp32=0.100, bf16=0.098)  # within the margin: fp32's accuracy wins
    assert pc.for_inference(CPU_AUTO, g).precision == "fp32"
    assert pc.for_inference(resolve_runtime("cpu", "bf16"), g).precision == "bf16"  # a given precision is not timed


def test_the_key_changes_with_torch_the_machine_and_the_work(tmp_path, monkeypatch):
    work = {"work": "upscale", "network": pc.structure_key(tiny_generator()), "input": [1, 3, 64, 64]}
    key = pc.work_key(CPU_AUTO, work)
    assert pc.work_key(CPU_AUTO, dict(work)) == key
    assert pc.work_key(CPU_AUTO, {**work, "input": [1, 3, 128, 128]}) != key
    assert pc.work_key(CPU_AUTO, {**work, "work": "train"}) != key
    wider = Generator(2, blocks=1, channels=16)
    assert pc.structure_key(wider) != work["network"]
    assert pc.structure_key(Generator(2, blocks=1, channels=8)) == work["network"]  # other weights, one speed
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert pc.work_key(CPU_AUTO, work) != key
    monkeypatch.undo()
    read = pc.cpu_identity
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu sse2 avx512_bf16\n\nprocessor\t: 1\n")
    assert read(cpuinfo) == ("Some Xeon", "fpu sse2 avx512_bf16")
    monkeypatch.setattr(pc, "cpu_identity", lambda: read(cpuinfo))
    keys = {key, pc.work_key(CPU_AUTO, work)}
    for model, flags in [("Some Xeon", "fpu sse2 amx_bf16"), ("Other", "fpu sse2 amx_bf16")]:  # other flags, model
        cpuinfo.write_text(f"model name\t: {model}\nflags\t\t: {flags}\n")
        keys.add(pc.work_key(CPU_AUTO, work))
    assert len(keys) == 4


@pytest.mark.parametrize(
    "damage", [b"\x00garbage{", b'{"timings": [1]}', b'{"timings": {"k": {"seconds": 3}}}', "folder"]
)
def test_a_damaged_cache_is_ignored_and_replaced(damage, precision_cache, caplog):
    precision_cache.parent.mkdir(parents=True)
    if damage == "folder":
        precision_cache.mkdir()
    else:
        precision_cache.write_bytes(damage)
    chosen = pc.for_inference(CPU_AUTO, tiny_generator())
    assert chosen.chosen.endswith(" a tile, measured)")
    if damage == "folder":
        assert "cannot cache the measured precision" in caplog.text
    else:
        if damage != b'{"timings": {"k": {"seconds": 3}}}':  # the layout holds; its one entry does not
            assert "ignoring the precision cache" in caplog.text
        entries = json.loads(precision_cache.read_text())["timings"]
        assert any(set(e["seconds"]) == {"fp32", "bf16"} for e in entries.values() if e["seconds"] != 3)
        assert pc.for_inference(CPU_AUTO, tiny_generator()).chosen.endswith(" a tile, cached)")


def test_a_resume_keeps_the_precision_it_started_in(photo_dir, tmp_path, precision_cache, caplog):
    def config(run_dir, steps, precision="auto"):
        extra = ("train.epochs=2", f"train.max_steps={steps}", f"train.precision={precision}")
        return load_config("demo", tiny_overrides(photo_dir, run_dir, *extra))

    part = train(config(tmp_path / "part", 2))
    started = json.loads((part / "run.json").read_text())["precision"]
    assert started["how"] == "measured" and set(started["seconds"]) == {"fp32", "bf16"}
    ran = started["precision"]
    other = "bf16" if ran == "fp32" else "fp32"
    plant(precision_cache, fp32=0.001 if other == "fp32" else 1.0, bf16=0.001 if other == "bf16" else 1.0)
    fresh = pc.measure_training(resolve_runtime("cpu", "auto"), config(tmp_path / "unused", 4))
    assert (fresh.precision, fresh.how) == (other, "cached")  # a new run would now take the other

    caplog.set_level(logging.INFO, "srgan")
    train(config(part, 4), resume=part)
    resumed = json.loads((part / "run.json").read_text())["precision"]
    assert (resumed["precision"], resumed["how"]) == (ran, "the run's own, kept")
    assert f"precision auto: {ran} (" in caplog.text and " a step, the run's own, kept)" in caplog.text
    whole = train(config(tmp_path / "whole", 4, precision=ran))
    assert json.loads((whole / "run.json").read_text())["precision"] == {
        "precision": ran,
        "how": "given",
        "seconds": {},
        "unit": "a step",
    }
    assert_same_checkpoints(part / "checkpoints" / "last.pt", whole / "checkpoints" / "last.pt")


def test_a_resumed_run_json_without_a_usable_precision(tmp_path, caplog):
    from srgan.files.errors import SrganError
    from srgan.models.runtime import fast_bf16
    from srgan.training.run_folder import recorded_precision

    cpu, status = torch.device("cpu"), tmp_path / "run.json"
    flags_rule = "bf16" if fast_bf16(cpu) else "fp32"
    status.write_text(json.dumps({"state": "interrupted", "step": 2}))  # a run started before precision was recorded
    assert recorded_precision(tmp_path, cpu).precision == flags_rule and "records no precision" in caplog.text
    status.write_text("{torn")
    assert recorded_precision(tmp_path, cpu).precision == flags_rule and "unreadable" in caplog.text
    status.write_text(json.dumps({"precision": {"precision": "bf16", "seconds": {"fp32": 0.5, "bf16": 0.25}}}))
    kept = recorded_precision(tmp_path, cpu)
    assert (kept.precision, kept.seconds) == ("bf16", {"fp32": 0.5, "bf16": 0.25})
    status.write_text(json.dumps({"precision": {"precision": "fp16", "how": "given"}}))  # a CUDA run resumed here
    with pytest.raises(SrganError, match="trained in fp16, which cpu here does not run; resume it with --set"):
        recorded_precision(tmp_path, cpu)
