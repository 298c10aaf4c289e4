"""`srgan bench train|upscale`: figures for docs/performance.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from srgan.cli.common import CONFIG_HELP, DEVICE_HELP, PRECISION_HELP, SET_HELP, measured_runtime, runtime_from_options
from srgan.files.errors import SrganError

bench_app = typer.Typer(no_args_is_help=True, help="Time the training step and the upscaling path.")

# The generator that `bench upscale` and `bench video` time.
BenchCheckpoint = Annotated[
    Path | None,
    typer.Option(
        "--checkpoint", "-k", help="A trained generator; default: random weights of the config's architecture."
    ),
]


@bench_app.command("train")
def train(
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = "leftthomas_x4",
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    batch: Annotated[int, typer.Option("--batch", help="Crops per step.")] = 16,
    crop: Annotated[int, typer.Option("--crop", help="HR crop side.")] = 96,
    blocks: Annotated[
        int | None,
        typer.Option(
            "--blocks", help="Generator blocks (model.blocks; default: the config's), passed to the yardstick too."
        ),
    ] = None,
    iters: Annotated[int, typer.Option("--iters", help="Timed steps (after the warm-up).")] = 5,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed steps first.")] = 1,
    yardstick: Annotated[
        Path | None,
        typer.Option(
            "--yardstick",
            help="Also time this yardstick script (../shared/bench/yardstick_step.py) on the same shapes.",
        ),
    ] = None,
    compare_update: Annotated[
        bool,
        typer.Option(
            "--compare-update",
            help="Also time the other gan.update (retain_graph / detach), the two steps "
            "taken in turn in one process, and report retain_over_detach.",
        ),
    ] = False,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            help="Also time the config with this one setting changed (KEY=VALUE, e.g. "
            "train.deterministic=false), the two steps taken in turn, and report compared_over_this.",
        ),
    ] = None,
    flops: Annotated[
        bool,
        typer.Option(
            "--flops",
            help="Also count the step's floating-point operations (and the yardstick's), measure the machine's "
            "matmul rate, and report the largest speed-up a step doing these operations could reach.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON line.")] = False,
) -> None:
    """Seconds per training step of the real step (random batch, random VGG weights)."""
    # the config loader (yaml) here and torch below load in the command, not at start-up: srgan --help stays fast
    from srgan.configs import load_config

    if min(batch, crop, iters, blocks or 1) < 1 or warmup < 0:
        raise SrganError("--batch, --crop, --blocks and --iters: expected at least 1; --warmup: 0 or more")
    settings = [
        f"data.batch_size={batch}",
        f"data.crop_size={crop}",
        "loss.perceptual.weights=none",
        *([f"model.blocks={blocks}"] if blocks is not None else []),
        *(overrides or []),
    ]
    resolved = load_config(config, settings)
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.bench.train import bench_interleaved, check_yardstick_shapes, run_yardstick, yardstick_command

    if compare_update and compare:
        raise SrganError("--compare-update and --compare: one comparison at a time")
    if compare:
        result, other_result = bench_interleaved([resolved, load_config(config, [*settings, compare])], iters, warmup)
        result["compared"] = compare
        result["compared_median_s_per_step"] = other_result["median_s_per_step"]
        result["compared_over_this"] = other_result["median_s_per_step"] / result["median_s_per_step"]
    elif compare_update:
        other = "detach" if resolved.gan.update == "retain_graph" else "retain_graph"
        result, other_result = bench_interleaved(
            [resolved, load_config(config, [*settings, f"gan.update={other}"])], iters, warmup
        )
        result[f"{other}_median_s_per_step"] = other_result["median_s_per_step"]
        retain, detach = (result, other_result) if other == "detach" else (other_result, result)
        result["retain_over_detach"] = retain["median_s_per_step"] / detach["median_s_per_step"]
    else:
        result = bench_interleaved([resolved], iters, warmup)[0]
    if yardstick is not None:
        esrgan = check_yardstick_shapes(yardstick, resolved)
        theirs = run_yardstick(yardstick, resolved, iters, warmup, esrgan)
        result["yardstick"] = {key: theirs.get(key) for key in ("impl", "batch", "crop", "scale", "blocks")}
        result["yardstick_median_s_per_step"] = theirs["median_s_per_iter"]
        result["speedup"] = theirs["median_s_per_iter"] / result["median_s_per_step"]
    if flops:
        from srgan.bench.flops import flops_report  # here for the same reason as the imports above

        count_command = yardstick_command(yardstick, resolved, 1, 0, esrgan) if yardstick is not None else None
        yardstick_s = result.get("yardstick_median_s_per_step")
        result.update(flops_report(resolved, result["median_s_per_step"], count_command, yardstick_s))
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(
        f"train step: {result['median_s_per_step']:.3f} s median, {result['min_s_per_step']:.3f} s min, "
        f"{result['images_per_s']:.1f} images/s; {result['device']} {result['precision']}, "
        f"{'channels_last' if result['channels_last'] else 'NCHW'}, update {result['update']}, "
        f"batch {batch}, crop {crop}, peak RSS {result['peak_rss_mb']:.0f} MB"
    )
    peak = f", predicted peak {result['planned_peak_mb']:.0f} MB" if result["planned_peak_mb"] is not None else ""
    typer.echo(
        f"plan: micro-batch {result['micro_batch']} ({result['plan']}{peak}); planning took {result['plan_s']:.2f} s, "
        f"{result['plan_over_step']:.2f} steps (the first, cold, step took {result['first_step_s']:.2f} s)"
    )
    if "retain_over_detach" in result:
        typer.echo(f"retain_graph / detach, interleaved: {result['retain_over_detach']:.3f}")
    if "compared" in result:
        typer.echo(
            f"with {result['compared']}: {result['compared_median_s_per_step']:.3f} s median, "
            f"{result['compared_over_this']:.3f}x this config's time, interleaved"
        )
    if "speedup" in result:
        typer.echo(f"yardstick: {result['yardstick_median_s_per_step']:.3f} s median: {result['speedup']:.2f}x faster")
    if "gflop_per_step" in result:
        rates = ", ".join(f"{rate:.0f} {name}" for name, rate in result["matmul_gflop_per_s"].items())
        typer.echo(
            f"work: {result['gflop_per_step']:.1f} GFLOP a step at {result['gflop_per_s']:.0f} GFLOP/s "
            f"({result['fraction_of_matmul_rate']:.0%} of this machine's matmul rate: {rates} GFLOP/s)"
        )
    if "speedup_ceiling" in result:
        typer.echo(
            f"yardstick's work: {result['yardstick_gflop_per_step']:.1f} GFLOP a step at "
            f"{result['yardstick_gflop_per_s']:.0f} GFLOP/s; the most any step doing this step's work at the "
            f"matmul rate could gain over it: {result['speedup_ceiling']:.2f}x"
        )


@bench_app.command("upscale")
def upscale(
    size: Annotated[str, typer.Option("--size", help="Input size WxH (a real photo resized to it).")] = "512x512",
    checkpoint: BenchCheckpoint = None,
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = "srgan_x4",
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    iters: Annotated[int, typer.Option("--iters", help="Timed runs (after the warm-up).")] = 3,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed runs first.")] = 1,
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline/--no-baseline",
            help="Also time a plain fp32 NCHW forward.",
        ),
    ] = True,
    onnx: Annotated[
        Path | None,
        typer.Option(
            "--onnx",
            help="Also time this ONNX file (srgan export) in onnxruntime on the CPU, on the same image "
            "with as many threads; compare with --precision fp32.",
        ),
    ] = None,
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON line.")] = False,
) -> None:
    """Megapixels/s and peak memory of srgan upscale, and its speedup over a plain fp32 NCHW forward
    (and onnxruntime's time with --onnx)."""
    # the config loader (yaml) here and torch below load in the command, not at start-up: srgan --help stays fast
    from srgan.configs import load_config

    width, height = frame_size(size, "512x512")
    if iters < 1 or warmup < 0:
        raise SrganError("--iters: expected at least 1; --warmup: 0 or more")
    from srgan.bench.upscale import bench_upscale  # torch loads here, not at start-up: srgan --help stays fast

    runtime = runtime_from_options(device, precision)
    generator = bench_generator(checkpoint, load_config(config, overrides or []))
    runtime = measured_runtime(runtime.place(generator), runtime)
    result = bench_upscale(generator, runtime, width, height, iters, warmup, baseline, onnx)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(
        f"upscale {width}x{height} x{result['scale']} ({result['arch']}): {result['median_s']:.3f} s median, "
        f"{result['output_mp_per_s']:.2f} output MP/s; torch {result['torch']} {result['device']} "
        f"{result['precision']}, {result['threads']} threads, tile {result['tile'] or 'none'}, "
        f"peak RSS {result['peak_rss_mb']:.0f} MB"
    )
    if onnx is not None:
        typer.echo(
            f"{result['onnx_runtime']}, {result['onnx_threads']} threads, input {result['onnx_input_type']}: "
            f"{result['onnx_median_s']:.3f} s median, {result['onnx_over_torch']:.2f}x torch's time; "
            f"outputs differ by at most {result['onnx_max_level_diff']} 8-bit levels"
        )
    if baseline:
        typer.echo(
            f"plain fp32 NCHW forward: {result['baseline_median_s']:.3f} s: {result['speedup']:.2f}x faster; "
            f"fp32 mode differs from it by at most {result['fp32_max_abs_diff']:.2e}"
        )


@bench_app.command("data")
def data(
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = "srresnet_x4",
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    batches: Annotated[int, typer.Option("--batches", help="Timed batches (after 2 untimed).")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON line.")] = False,
) -> None:
    """Crops per second (and per worker) of the configured data.train, and the memory of every process."""
    # the config loader (yaml) here and torch below load in the command, not at start-up: srgan --help stays fast
    from srgan.configs import load_config

    if batches < 1:
        raise SrganError(f"--batches: expected at least 1, got {batches}")
    resolved = load_config(config, overrides or [])
    from srgan.bench.data import bench_data  # torch loads here, not at start-up: srgan --help stays fast

    result = bench_data(resolved, batches)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(
        f"data ({result['source']}, {result['images']} images, {result['workers']} workers, batch {result['batch']}, "
        f"crop {result['crop']}, x{result['scale']} {result['degradation']}): {result['pairs_per_s']:.0f} (lr, hr) "
        f"pairs/s ({result['crops_per_s_per_worker']:.0f} a worker; {result['cpu_ms_per_pair']:.1f} CPU ms a pair), "
        f"{result['median_ms_per_batch']:.1f} ms a batch; setup {result['setup_s']:.1f} s; peak RSS of all "
        f"processes {result['peak_rss_mb']:.0f} MB (PSS {result['peak_pss_mb']:.0f}); memory written by the main "
        f"process {result['main_private_mb']:.0f} MB, a worker {result['worker_private_mb']:.0f} MB"
    )


@bench_app.command("metrics")
def metrics(
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = "demo",
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    extra: Annotated[
        str, typer.Option("--metrics", help="The metrics to time beside PSNR/SSIM, comma-separated.")
    ] = "lpips,lpips_vgg,dists",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON line.")] = False,
) -> None:
    """Validation seconds an image with PSNR/SSIM alone and with each learned metric added (needs their weights)."""
    # the config loader (yaml) and torch load in the command, not at start-up: srgan --help stays fast
    from srgan.configs import load_config
    from srgan.metrics import parse_metric_names

    names = [n for n in parse_metric_names(extra, "--metrics") if n not in ("psnr", "ssim")]
    resolved = load_config(config, overrides or [])
    from srgan.bench.metrics import bench_metrics  # torch loads here, not at start-up: srgan --help stays fast

    result = bench_metrics(resolved, names)
    if as_json:
        typer.echo(json.dumps(result))
        return
    first = result["rows"][0]
    where = result["machine"]
    typer.echo(
        f"validation of {first['images']} images of data.val, fp32, {where['threads']} threads, "
        f"{' '.join(where['cpu_flags'])}{', ' + where['gpu'] if 'gpu' in where else ''}"
    )
    for row in result["rows"]:
        typer.echo(
            f"{'+'.join(row['metrics']):<22} {row['s_per_image'] * 1000:8.1f} ms an image  x{row['ratio']:.2f}  "
            f"(networks loaded in {row['load_s']:.1f} s)"
        )


@bench_app.command("photos")
def photos(
    folder: Annotated[Path, typer.Argument(help="Where to write them.")],
    count: Annotated[int, typer.Option("--count", help="How many.")] = 24,
    size: Annotated[str, typer.Option("--size", help="WxH (DIV2K's photos are about 2040x1400).")] = "2040x1400",
    force: Annotated[bool, typer.Option("--force", help="Overwrite photos already there.")] = False,
) -> None:
    """DIV2K-like photos made from scikit-image's, to benchmark data loading when no real set is at hand."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.bench.data import (
        check_photo_size,
        make_photos,
    )

    if not 1 <= count <= 10000:
        raise SrganError(f"--count: expected 1 to 10000, got {count}")
    width, height = check_photo_size(size)
    written = make_photos(folder, count, width, height, force)
    typer.echo(f"{folder}: {len(written)} photos of {width}x{height}")


def torch_seed(seed: int) -> None:
    import torch  # here, not at start-up: srgan --help stays fast

    torch.manual_seed(seed)


@bench_app.command("video")
def video(
    size: Annotated[
        str,
        typer.Option(
            "--size",
            help="Frame size WxH of the clip (a pan over a real photo).",
        ),
    ] = "320x240",
    frames: Annotated[int, typer.Option("--frames", help="Frames in the clip (25 fps, with an AAC tone).")] = 24,
    batch: Annotated[int, typer.Option("--batch", help="Frames per forward pass, as srgan upscale --batch.")] = 4,
    checkpoint: BenchCheckpoint = None,
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP)] = "demo",
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    iters: Annotated[int, typer.Option("--iters", help="Timed rounds (after the warm-up).")] = 2,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed rounds first.")] = 1,
    compare_overlap: Annotated[
        bool,
        typer.Option(
            "--compare-overlap",
            help="On the CPU, also time srgan upscale with "
            "the network and the encoder running at once rather than in turn.",
        ),
    ] = False,
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON line.")] = False,
) -> None:
    """Frames/s of srgan upscale on a clip (decode, network and encode overlapped) against the network alone."""
    # the config loader (yaml) here and torch below load in the command, not at start-up: srgan --help stays fast
    from srgan.configs import load_config

    width, height = frame_size(size, "320x240")
    if min(frames, batch, iters) < 1 or warmup < 0:
        raise SrganError("--frames, --batch and --iters: expected at least 1; --warmup: 0 or more")
    from srgan.bench.video import bench_video  # torch loads here, not at start-up: srgan --help stays fast

    runtime = runtime_from_options(device, precision)
    generator = bench_generator(checkpoint, load_config(config, overrides or []))
    runtime = measured_runtime(runtime.place(generator), runtime)
    result = bench_video(generator, runtime, width, height, frames, batch, iters, warmup, compare_overlap)
    if as_json:
        typer.echo(json.dumps(result))
        return
    typer.echo(
        f"video {width}x{height} x{result['scale']}, {frames} frames: srgan upscale {result['pipeline_fps']:.2f} "
        f"frames/s, the network alone {result['network_fps']:.2f} ({result['pipeline_over_network']:.2f}x); "
        f"decode alone {result['decode_fps']:.0f}, encode alone {result['encode_fps']:.1f}, the three in turn "
        f"{result['serial_fps']:.2f}; {result['device']} {result['precision']}, batch {result['batch']}, "
        f"peak RSS {result['peak_rss_mb']:.0f} MB"
    )
    if compare_overlap:
        typer.echo(f"the network and the encoder at once: {result['pipeline_overlapped_fps']:.2f} frames/s")


def frame_size(size: str, example: str) -> tuple[int, int]:
    """--size WxH -> (width, height), both at least 1; SrganError for anything else."""
    try:
        width, height = (int(v) for v in size.lower().split("x"))
    except ValueError:
        raise SrganError(f"--size: expected WxH such as {example}, got {size!r}") from None
    if min(width, height) < 1:
        raise SrganError(f"--size: expected WxH of at least 1x1, got {size!r}")
    return width, height


def bench_generator(checkpoint, resolved):
    """The generator to time: a checkpoint's, or random weights (seeded) of the config's architecture."""
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.models import build_generator
    from srgan.models.checkpoint import load_generator

    if checkpoint is not None:
        return load_generator(checkpoint)
    torch_seed(resolved.train.seed)
    return build_generator(resolved.model)
