"""`python tools/compile_check.py`: train.compile on the CPU for the tiny
instances of spandrel's architectures the tests use (tests/test_spandrel_archs.py
TINY), two steps each, all in one process as a sweep runs them, eager then
compiled, and one line per architecture with both runs' g_loss. The suite
leaves this out: inductor compiles a tiny network's first step for about a
minute with a cold cache (docs/models.md). A developer's tool, run from the
checkout; it writes only under a temporary folder."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from conftest import skimage_photo  # noqa: E402
from srgan.configs import load_config  # noqa: E402
from srgan.training import train  # noqa: E402
from test_spandrel_archs import TINY, spandrel_overrides  # noqa: E402


def losses(run: Path) -> list[float]:
    return [json.loads(line)["g_loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def main() -> int:
    failed = 0
    with tempfile.TemporaryDirectory() as folder:
        photos = Path(folder) / "photos"
        photos.mkdir()
        for name in ("astronaut", "coffee", "chelsea"):
            Image.fromarray(skimage_photo(name)[60:188, 150:278]).save(photos / f"{name}.png")
        for arch in TINY:
            rows = {}
            for compiled in (False, True):
                run = Path(folder) / f"{arch}-{compiled}"
                base = [
                    o
                    for o in spandrel_overrides(arch, photos, run)
                    if not o.startswith(("train.device", "train.precision"))
                ]
                extra = ["train.device=cpu", "train.precision=bf16", f"train.compile={str(compiled).lower()}"]
                started = time.perf_counter()
                try:
                    run = train(load_config("demo", [*base, *extra]))
                    rows[compiled] = (losses(run), time.perf_counter() - started)
                except Exception as error:  # report every architecture, then fail
                    rows[compiled] = (f"{type(error).__name__}: {str(error).splitlines()[0][:200]}", 0.0)
            (eager, _), (compiled_losses, seconds) = rows[False], rows[True]
            ok = isinstance(compiled_losses, list)
            failed += not ok
            print(f"{arch}: eager g_loss {eager}, compiled {compiled_losses} ({seconds:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
