"""``webrl evaluation store`` and ``webrl evaluation show``: an actor's greedy evaluation on the test tasks (or, with
``--validation-tasks N``, on the suite's validation sample of N train-split tasks that ``evaluation.validation_tasks``
validates updates on), stored under its content key (:mod:`webrl.store.evaluations`), so runs that start from that
actor read it back instead of evaluating it again."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from webrl.commands import check_loadable, check_model_folder, check_output_folder, quiet_model_loading
from webrl.config import Settings, get_settings
from webrl.method.hyperparams import MAX_EPISODE_STEPS, Rollout
from webrl.wire.contracts import MAX_CONCURRENCY

console = Console()


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Stored greedy evaluations of an actor on the test (or validation) tasks, by content key.",
                        no_args_is_help=True)
    group.command("store")(store)
    group.command("show")(show)
    app.add_typer(group, name="evaluation")


def _rollout(max_steps: int) -> Rollout:
    """The horizon given, every early stop at the method's default (the presets' own)."""
    return Rollout(max_steps=max_steps)


def store(
    actor: Path = typer.Option(..., help="The actor folder (the start actor of the runs that will reuse it)."),
    max_steps: int = typer.Option(8, min=1, max=MAX_EPISODE_STEPS, help="Horizon (the CPU presets': 8)."),
    concurrency: int = typer.Option(8, min=1, max=MAX_CONCURRENCY, help="Browser episodes at once."),
    into: Path = typer.Option(None, help="Folder to write the stored evaluation to. Default: <artifacts>/evaluations; "
                              "webrl/assets/evaluations ships it with the package."),
    validation_tasks: int = typer.Option(0, min=0, help="The suite's validation sample of this many train-split "
                                         "tasks instead of the test tasks (a run's --validation-tasks)."),
) -> None:
    """Evaluate ``--actor`` greedily on every test task, or on the validation sample (episodes it already has at this
    horizon are reused), and store the per-task results under their content key."""
    from webrl.commands.train import ensure_ready, sandbox_if_needed
    from webrl.orchestration.evaluate import evaluation_episodes
    from webrl.orchestration.stored_evaluation import key_for, store_trajectories
    from webrl.store.evaluations import is_storable

    settings = get_settings()
    check_model_folder(actor, "--actor")
    check_loadable(settings, actor, "--actor", configured=settings.actor.model)
    check_output_folder(into, "--into")
    ensure_ready(settings)
    keys, split = _tasks(settings, validation_tasks)
    key = key_for(settings, actor.resolve(), keys, _rollout(max_steps), split)
    if not is_storable(key):
        raise typer.BadParameter(f"a {key.dtype} evaluation is not stored: greedy decoding is batch-invariant only "
                                 "in float32 (WEBRL_MODELS__DTYPE=float32)")
    quiet_model_loading()
    with sandbox_if_needed(settings):
        ids = evaluation_episodes(settings, actor, keys, concurrency=concurrency, max_steps=max_steps)
    path = store_trajectories(settings, key, ids, into)
    console.print(f"stored: {path}")


def show(
    actor: Path = typer.Option(..., help="The actor folder."),
    max_steps: int = typer.Option(8, min=1, max=MAX_EPISODE_STEPS, help="Horizon."),
    validation_tasks: int = typer.Option(0, min=0, help="On the suite's validation sample of this many train-split "
                                         "tasks instead of the test tasks."),
) -> None:
    """Whether an evaluation of ``--actor`` at this horizon is stored for the code and settings as they are now, and
    its success per site."""
    from webrl.commands.train import ensure_ready
    from webrl.store.evaluations import find

    check_model_folder(actor, "--actor")  # a mistyped path would hash to a key with nothing stored under it
    settings = get_settings()
    ensure_ready(settings)
    from webrl.orchestration.stored_evaluation import key_for

    keys, split = _tasks(settings, validation_tasks)
    key = key_for(settings, actor.resolve(), keys, _rollout(max_steps), split)
    stored = find(settings, key)
    if stored is None:
        console.print(f"no stored evaluation under key {key.digest()[:12]} (a run starting from this actor "
                      "evaluates it)")
        raise typer.Exit(1)
    from webrl.method.rewards import is_success

    table = Table("site", "tasks", "solved", title=f"stored evaluation {key.digest()[:12]} ({stored.measured})")
    for site in sorted({r.site for r in stored.results.values()}):
        rows = [r for r in stored.results.values() if r.site == site]
        table.add_row(site, str(len(rows)), str(sum(is_success(r.score) for r in rows)))
    table.add_row("overall", str(len(stored.results)), str(sum(is_success(r.score) for r in stored.results.values())))
    console.print(table)


def _tasks(settings: Settings, validation_tasks: int) -> tuple[list[str], str]:
    """(the evaluated tasks, their split): every test task, or the validation sample of ``validation_tasks``
    train-split tasks (:func:`webrl.store.template_groups.validation_sample`)."""
    from webrl.db import repository as repo
    from webrl.db.session import session_scope
    from webrl.store.template_groups import validation_sample

    if validation_tasks:
        return validation_sample(settings, validation_tasks), "train"
    with session_scope(settings) as s:
        return [t.key for t in repo.tasks_where(s, split="test")], "test"
