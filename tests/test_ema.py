"""The EMA of the generator: the average itself, computed by hand, in a
module and over the steps of a real run (test_train checks that it is saved
and used for upscaling)."""

import torch

from conftest import tiny_overrides
from srgan.configs import load_config
from srgan.models import Generator
from srgan.training import train
from srgan.training.ema import GeneratorEMA


def test_the_average_after_two_updates_is_the_one_by_hand():
    """decay 0.9: w1 = 0.9 w0 + 0.1 g1, w2 = 0.9 w1 + 0.1 g2 (a decay the
    wrong way round weighs the newest weights 0.9); BN statistics are the
    latest, not averaged."""
    torch.manual_seed(0)
    g = Generator(2, 1, 8)  # BatchNorm: buffers as well as parameters
    ema = GeneratorEMA(g, 0.9)
    expected = {name: p.detach().clone() for name, p in g.named_parameters()}
    for _ in range(2):
        with torch.no_grad():
            for p in g.parameters():
                p.add_(torch.randn_like(p))
            for b in g.buffers():
                if b.is_floating_point():
                    b.uniform_(0.5, 2.0)
        ema.update(g)
        expected = {name: 0.9 * expected[name] + 0.1 * p.detach() for name, p in g.named_parameters()}
    average = dict(ema.model.named_parameters())
    for name, want in expected.items():
        assert torch.allclose(average[name], want, rtol=1e-6, atol=1e-6), name
    for (name, kept), latest in zip(ema.model.named_buffers(), g.buffers(), strict=True):
        assert torch.equal(kept, latest), name


def test_a_runs_saved_average_moves_by_one_decay_step_per_training_step(photo_dir, tmp_path):
    """Step 2's checkpoint (the end of epoch 1) and step 3's: the average in
    the second is 0.9 of the first's plus 0.1 of step 3's generator."""
    config = load_config(
        "demo",
        tiny_overrides(photo_dir, tmp_path / "run", "train.epochs=2", "train.max_steps=3", "train.ema_decay=0.9"),
    )
    run = train(config)
    step2 = torch.load(run / "checkpoints" / "epoch_001.pt", weights_only=True)
    step3 = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    assert (step2["step"], step3["step"]) == (2, 3)
    moved = False
    for name, average in step3["generator_ema"].items():
        before, current = step2["generator_ema"][name], step3["generator"][name]
        assert torch.allclose(average, 0.9 * before + 0.1 * current, rtol=1e-6, atol=1e-9), name
        moved |= not torch.equal(before, current)
    assert moved  # the generator moved: the check above could tell a wrong decay
