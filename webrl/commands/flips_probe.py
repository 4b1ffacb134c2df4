"""``webrl probe build``: the flips probe of an actor (steps it gets right, whose later changes a phase counts)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from webrl.commands import quiet_model_loading
from webrl.config import get_settings


def register(app: typer.Typer) -> None:
    probe = typer.Typer(help="The flips probe: steps an actor gets right, to count what an update changes.",
                        no_args_is_help=True)
    probe.command("build")(build)
    app.add_typer(probe, name="probe")


def build(
    actor: Path = typer.Option(..., exists=True, file_okay=False, help="The actor (SFT) folder the probe is for."),
    output: Path = typer.Option(..., help="The probe file to write (*.jsonl.gz)."),
    per_site: int = typer.Option(24, min=1, help="Probe steps per site at most (each is one forward per epoch)."),
    per_template: int = typer.Option(1, min=1, help="Train tasks per template the oracle demonstrates."),
    seed: int = typer.Option(1, help="Seed of the task sample and of the step order (the SFT demos used 0)."),
    concurrency: int = typer.Option(4, min=1, help="Browser episodes at once."),
) -> None:
    """Demonstrate train tasks with the sandbox oracle and keep the steps ``--actor`` picks greedily."""
    from webrl.orchestration.probe_build import build_probe

    if not output.name.endswith(".jsonl.gz"):
        raise typer.BadParameter(f"{output.name} does not end with .jsonl.gz", param_hint="--output")
    quiet_model_loading()
    made = build_probe(get_settings(), actor, output, per_site=per_site, per_template=per_template, seed=seed,
                       concurrency=concurrency)
    table = Table("site", "probe steps")
    for site, n in made.kept.items():
        table.add_row(site, str(n))
    Console().print(table)
    Console().print(f"{sum(made.kept.values())} of {made.candidates} oracle steps ({made.tasks} tasks) -> {made.path}")
