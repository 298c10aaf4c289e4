"""The three generators side by side, for the README's "Which generator?":
parameters, and the time of one forward pass of a 64x64 LR tile through
srgan's inference path (the fused eval network, channels_last, autocast),
the networks taken in turn in one process so that a busy machine slows
them alike. Random weights (the time does not depend on them).

    python -m srgan.bench.generators --precision fp32 --iters 10
    python -m srgan.bench.generators --config span_x4 --config dat2_x4   # presets' generators instead
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from srgan.bench.machine import machine, synchronize
from srgan.configs import load_config
from srgan.inference.upscale import inference_network
from srgan.models import Runtime, build_generator

# (label, --set values on top of srgan_x4): the presets' sizes.
GENERATORS: list[tuple[str, list[str]]] = [
    ("srresnet 16x64", ["model.arch=srresnet", "model.blocks=16", "model.channels=64"]),
    ("rrdb 23x64", ["model.arch=rrdb", "model.blocks=23", "model.channels=64", "model.growth=32"]),
    ("compact 32x64", ["model.arch=compact", "model.blocks=32", "model.channels=64"]),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", type=int, default=64, help="the LR tile's side")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    parser.add_argument(
        "--config", action="append", help="a preset or YAML file: time its generator instead of the three (repeatable)"
    )
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    runtime = Runtime(device, args.precision)
    torch.manual_seed(0)
    networks = {}
    chosen = [(name, name, []) for name in args.config] if args.config else [("srgan_x4", *g) for g in GENERATORS]
    for source, label, settings in chosen:
        generator = build_generator(load_config(source, settings).model)
        networks[label] = (sum(p.numel() for p in generator.parameters()), inference_network(generator, runtime))
    x = runtime.tensor(torch.rand(1, 3, args.size, args.size))
    times: dict[str, list[float]] = {label: [] for label in networks}
    with torch.inference_mode():
        for i in range(args.warmup + args.iters):
            for label, (_, network) in networks.items():
                started = time.perf_counter()
                with runtime.autocast():
                    network(x)
                synchronize(device)
                if i >= args.warmup:
                    times[label].append(time.perf_counter() - started)
    rows = [
        {
            "generator": label,
            "parameters": count,
            "min_ms": round(1000 * min(times[label]), 1),
            "median_ms": round(1000 * statistics.median(times[label]), 1),
        }
        for label, (count, _) in networks.items()
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "bench": "generators",
                    "precision": args.precision,
                    "size": args.size,
                    "iters": args.iters,
                    "rows": rows,
                    **machine(),
                }
            )
        )
        return 0
    print(
        f"one {args.size}x{args.size} LR tile, x4, {args.device} {args.precision}, {args.iters} runs each, "
        f"taken in turn ({machine()})"
    )
    print(f"{'generator':<16} {'parameters':>12} {'min ms':>9} {'median ms':>10}")
    for row in rows:
        print(f"{row['generator']:<16} {row['parameters']:>12,} {row['min_ms']:>9} {row['median_ms']:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
