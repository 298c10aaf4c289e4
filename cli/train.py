"""`srgan train`, `srgan config list|show`, `srgan samples`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from srgan.cli.common import CONFIG_HELP, SET_HELP
from srgan.files import check_output
from srgan.files.errors import SrganError


def train(
    config: Annotated[str | None, typer.Option("--config", "-c", help=CONFIG_HELP + " Default: demo.")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="A run folder to continue from its checkpoints/last.pt (with its config.yaml "
            "unless --config is given; --set still applies), or a sweep folder to continue.",
        ),
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            "--sweep",
            help="KEY=V1,V2[,...]: train one variant per value, one after another, each in its own "
            "folder inside the sweep folder (train.run_dir, default runs/<name>-sweep-<time>); repeat for a grid.",
        ),
    ] = None,
) -> None:
    """Train a generator and discriminator as the config says (SIGINT/SIGTERM: save and stop)."""
    from srgan.configs import load_config, resume_config  # yaml loads here, not at start-up: srgan --help stays fast
    from srgan.training.sweep import is_sweep  # torch loads here, not at start-up: srgan --help stays fast

    overrides, sweep = overrides or [], sweep or []  # None: the option not given
    if sweep or (resume is not None and is_sweep(resume)):
        return train_sweep(config, overrides, sweep, resume)
    if resume is not None and config is None:
        config = str(resume_config(resume))
    resolved = load_config(config, overrides)  # before importing torch: bad keys fail fast
    run_dir = Path(resolved.train.run_dir) if resume is None and resolved.train.run_dir else None
    # a run's files among the sweep's variant folders would belong to neither
    if run_dir is not None and is_sweep(run_dir):
        raise SrganError(
            f"train.run_dir: {run_dir} holds a sweep (sweep.yaml); a run needs a folder of its own: "
            f"choose another train.run_dir, or continue the sweep with srgan train --resume {run_dir}"
        )
    if run_dir is not None:  # the run writes its resolved config there: never over the --config it reads
        check_output(run_dir / "config.yaml", overwrite=True)  # before the work (RunFolder.open checks it again)
    # torch loads here, not at start-up: srgan --help stays fast
    from srgan.training import TrainingInterrupted
    from srgan.training import train as run_training

    try:
        run_training(resolved, resume=resume)
    except TrainingInterrupted as stop:
        typer.echo(f"srgan: {stop}", err=True)
        raise typer.Exit(128 + stop.signum) from None  # the message above says why


def train_sweep(config: str | None, overrides: list[str], sweep: list[str], resume: Path | None) -> None:
    """`srgan train --sweep`, or --resume of a sweep folder: train every variant, then print their table;
    exit 1 if any did not finish. SrganError for --resume with --sweep or --config."""
    from srgan.training import TrainingInterrupted  # torch loads here, not at start-up: srgan --help stays fast
    from srgan.training.runs import format_runs, sort_rows, summarize
    from srgan.training.sweep import run_sweep

    if resume is not None and (sweep or config):
        raise SrganError(f"--resume {resume}: a sweep continues with its own plan; give no --sweep or --config")
    try:
        folders = run_sweep(config, overrides, sweep, resume)
    except TrainingInterrupted as stop:
        typer.echo(f"srgan: {stop}", err=True)
        raise typer.Exit(128 + stop.signum) from None  # the message above says why
    rows = sort_rows([summarize(folder) for folder in folders])
    typer.echo(format_runs(rows, folders[0].parent))
    if any(row["state"] != "finished" for row in rows):
        raise typer.Exit(1)


def config_list() -> None:
    """The presets, one per line."""
    from srgan.configs import preset_names  # yaml loads here, not at start-up: srgan --help stays fast

    for name in preset_names():
        typer.echo(name)


def config_show(
    name: Annotated[str, typer.Argument(help=CONFIG_HELP)] = "demo",
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
) -> None:
    """Print a config fully resolved (defaults and overrides applied, the network's shape read from
    model.init_from and gan.init_from where the config leaves it open), as YAML: the config a run of it
    would train with."""
    from srgan.configs import config_to_yaml, load_config  # yaml loads here, not at start-up: srgan --help stays fast
    from srgan.configs.schema import OWN_ARCHS

    config = load_config(name, overrides or [])
    if config.model.init_from or config.gan.init_from:
        from srgan.training.init_from import read_init_files  # torch loads here, not at start-up

        config = read_init_files(config).config
    if config.model.arch not in OWN_ARCHS:  # spandrel's: its constructor's defaults complete model.options
        from srgan.models import resolve_architecture  # torch and spandrel load here, only for their architectures

        config = resolve_architecture(config)
    typer.echo(config_to_yaml(config), nl=False)


def config_archs() -> None:
    """The architectures model.arch takes: srgan's own three, then spandrel's SR networks (their class and options)."""
    from srgan.configs.schema import OWN_ARCHS
    from srgan.models.spandrel_archs import SPANDREL_ARCHS, settable_options  # spandrel and torch: seconds

    for name in OWN_ARCHS:
        typer.echo(f"{name:<10} srgan's own (docs/models.md)")
    for name, arch in SPANDREL_ARCHS.items():
        typer.echo(f"{name:<10} spandrel's {arch.network.__name__}: model.options {', '.join(settable_options(arch))}")


def samples(
    folder: Annotated[Path, typer.Argument(help="Where to write the built-in photos.")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite photos already there.")] = False,
) -> None:
    """Copy the built-in sample photos (builtin:samples) into FOLDER/train and FOLDER/val, and a held-out
    set no preset trains on into FOLDER/heldout/photos and FOLDER/heldout/synthetic."""
    from srgan.data.samples import write_samples  # torch loads here, not at start-up: srgan --help stays fast

    for target in write_samples(folder, force):
        typer.echo(target)
