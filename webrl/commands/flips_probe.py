"""``webrl probe build``: the flips probe of an actor (steps it gets right, whose later changes a phase counts);
``webrl probe anchors``: anchor steps in the same format (states ``actor.anchor_kl`` holds the policy on)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from webrl.commands import check_model_folder, check_output_file, quiet_model_loading
from webrl.config import get_settings
from webrl.orchestration.probe_build import ProbeBuild
from webrl.wire.contracts import DB_MAX_INT, MAX_CONCURRENCY

#: The largest ``--seed``: it is also the attempt number the oracle's demonstrations are stored under (an INTEGER
#: column), a tighter bound than a training seed's.
MAX_PROBE_SEED = DB_MAX_INT


def register(app: typer.Typer) -> None:
    probe = typer.Typer(help="The flips probe: steps an actor gets right, to count what an update changes.",
                        no_args_is_help=True)
    probe.command("build")(build)
    probe.command("anchors")(anchors)
    app.add_typer(probe, name="probe")


def build(
    actor: Path = typer.Option(..., exists=True, file_okay=False, callback=lambda actor: check_model_folder(
                               actor, "--actor"), help="The actor (SFT) folder the probe is for."),
    output: Path = typer.Option(..., callback=lambda output: check_probe_output(output),
                                help="The probe file to write (*.jsonl.gz)."),
    per_site: int = typer.Option(24, min=1, help="Probe steps per site at most (each is one forward per epoch)."),
    per_template: int = typer.Option(1, min=1, help="Train tasks per template the oracle demonstrates."),
    seed: int = typer.Option(1, min=0, max=MAX_PROBE_SEED, help="Seed of the task sample and of the step order (the "
                             "SFT demos used 0)."),
    concurrency: int = typer.Option(4, min=1, max=MAX_CONCURRENCY, help="Browser episodes at once."),
) -> None:
    """Demonstrate train tasks with the sandbox oracle and keep the steps ``--actor`` picks greedily."""
    from webrl.orchestration.probe_build import build_probe

    quiet_model_loading()
    made = build_probe(get_settings(), actor, output, per_site=per_site, per_template=per_template, seed=seed,
                       concurrency=concurrency)
    _print(made, "probe steps")


def anchors(
    actor: Path = typer.Option(..., exists=True, file_okay=False, callback=lambda actor: check_model_folder(
                               actor, "--actor"), help="The actor whose tokenizer renders the prompts."),
    output: Path = typer.Option(..., callback=lambda output: check_probe_output(output),
                                help="The anchors file to write (*.jsonl.gz)."),
    per_template: int = typer.Option(1, min=1, help="Train tasks per template the oracle demonstrates."),
    seed: int = typer.Option(2, min=0, max=MAX_PROBE_SEED, help="Seed of the task sample (the SFT demos used 0, the "
                             "shipped probe 1)."),
    exclude: Path = typer.Option(None, exists=True, dir_okay=False, help="A probe whose tasks are left out, so its "
                                 "flips stay a measure of states the anchor does not hold."),
    concurrency: int = typer.Option(4, min=1, max=MAX_CONCURRENCY, help="Browser episodes at once."),
    max_tasks: int = typer.Option(0, min=0, help="Demonstrate at most this many tasks (0: every one sampled)."),
) -> None:
    """Demonstrate train tasks with the sandbox oracle and write every step as an anchor step."""
    from webrl.models.probe import load_probe
    from webrl.orchestration.probe_build import build_anchors

    try:
        left_out = load_probe(exclude) if exclude else []
    except (OSError, ValueError) as exc:  # load_probe's ValueError also names a cut or corrupt gzip
        raise typer.BadParameter(f"{exclude} is not a probe file ({exc})", param_hint="--exclude") from None
    quiet_model_loading()
    _print(build_anchors(get_settings(), actor, output, per_template=per_template, seed=seed, exclude=left_out,
                         concurrency=concurrency, max_tasks=max_tasks or None), "anchor steps")


def check_probe_output(output: Path) -> Path:
    """An ``--output`` option's callback: a ``*.jsonl.gz`` file that can be written there (not a folder, no file on
    its way, a writable folder: :func:`webrl.commands.check_output_file`), else a usage error naming the option."""
    if not output.name.endswith(".jsonl.gz"):
        raise typer.BadParameter(f"{output.name} does not end with .jsonl.gz", param_hint="--output")
    check_output_file(output, "--output")
    return output


def _print(made: ProbeBuild, what: str) -> None:
    table = Table("site", what)
    for site, n in made.kept.items():
        table.add_row(site, str(n))
    Console().print(table)
    Console().print(f"{sum(made.kept.values())} of {made.candidates} oracle steps ({made.tasks} tasks) -> {made.path}")
