"""``webrl train`` (the whole WebRL loop, resumable) and ``webrl eval`` (success rate of an actor)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from webrl.commands import (
    check_loadable,
    check_model_files,
    check_model_folder,
    check_output_folder,
    check_split,
    quiet_model_loading,
)
from webrl.commands.progress_display import progress_display
from webrl.config import Settings, get_settings
from webrl.method.hyperparams import DEFAULTS, MAX_EPISODE_STEPS, MAX_TEMPERATURE, WebRLHyperparams, with_overrides
from webrl.model_folders import is_model_folder
from webrl.wire.contracts import MAX_CONCURRENCY, MAX_GENERATE, MAX_PARENTS, MAX_SEED, LogWith, TrackingSpec

if TYPE_CHECKING:
    from webrl.runs.eta import RunEta

console = Console()
log = logging.getLogger(__name__)


@contextlib.contextmanager
def sandbox_if_needed(settings: Settings) -> Iterator[None]:
    """In the embedded mode, serve the sandbox sites in this process, on the ports the site URLs name
    (the defaults, or local ports a user configured), while we run. Remote sites are left alone."""
    from webrl.sandbox.server import running_sandbox, sandbox_ports, sites_are_local

    if not (settings.eager and sites_are_local(settings)):
        yield
        return
    with running_sandbox(settings, ports=sandbox_ports(settings)):
        yield


def ensure_ready(settings: Settings) -> None:
    """Migrate the database and load the sandbox task suite when no task is stored yet."""
    from webrl.db.migrate import upgrade

    settings.ensure_dirs()
    upgrade(settings)
    from webrl.orchestration.task_suite import load_checked, load_summary

    loaded = load_checked(settings, settings.seed)
    if any(split.new for split in loaded.values()):
        console.print(f"loaded the sandbox task suite: {load_summary(loaded)}")


class RichProgress:
    """One progress bar per stage label, fed by the pipeline's progress hook; with :meth:`follow`, above them a
    run-level bar whose line is the estimate of the run's time left (:class:`webrl.runs.eta.RunEta`)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.bars: dict[str, Any] = {}
        self.eta: RunEta | None = None
        self.run_bar: Any = None

    def __call__(self, label: str, done: int, total: int) -> None:
        if label not in self.bars:
            self.bars[label] = self.progress.add_task(label, total=max(total, 1))
        self.progress.update(self.bars[label], completed=done, total=max(total, 1))
        if self.eta is not None:
            self.eta.progress(label, done, total)
            self.show_run()

    def follow(self, eta: RunEta) -> None:
        """Show the run-level bar of ``eta`` (its stages done of the plan's) from now on."""
        self.eta = eta
        self.show_run()

    def stage_done(self, phase: int, stage: str, metrics: dict[str, Any]) -> None:
        """The pipeline's on_stage report, for the run-level bar."""
        if self.eta is not None:
            self.eta.record(phase, stage, metrics)
            self.show_run()

    def show_run(self) -> None:
        if self.eta is None:
            return
        if self.run_bar is None:
            self.run_bar = self.progress.add_task("run", total=len(self.eta.plan), run=True)
        self.progress.update(self.run_bar, description=self.eta.line(), completed=len(self.eta.finished))


def _progress() -> Progress:
    quiet_model_loading()
    return progress_display(console)


def hyperparams_for(preset: str | None, overrides: dict[str, Any],
                    flags: dict[str, str] | None = None) -> WebRLHyperparams:
    """The preset's record (the defaults without one) with the ``{"group.field": value}`` flags that were given
    (None: not given) replaced; a value the record refuses is a ``typer.BadParameter``, naming the flag of
    ``flags`` (``{"group.field": flag}``) that gave the value (:func:`flag_at_fault`)."""
    from webrl.method.presets import PRESETS

    if preset and preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}", param_hint="--preset")
    base = PRESETS[preset] if preset else DEFAULTS
    from pydantic import ValidationError

    given = {key: value for key, value in overrides.items() if value is not None}
    named = {key: flag for key, flag in (flags or {}).items() if key in given}
    try:
        return with_overrides(base, given)
    except ValidationError as exc:  # one line naming the field: "actor.lr: Input should be greater than 0"
        first = exc.errors()[0]
        key, why = ".".join(map(str, first["loc"])), str(first["msg"]).removeprefix("Value error, ")
        message = f"{key}: {why}" if key else why
        raise typer.BadParameter(message, param_hint=flag_at_fault(key, message, named)) from exc
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=flag_at_fault("", str(exc), named)) from exc


def flag_at_fault(key: str, message: str, flags: dict[str, str]) -> str | None:
    """The flag of ``flags`` (``{"group.field": flag}``, those given) that a refusal of the record names: the one of
    the refused field ``key``, else the given field the ``message`` names first; None when it names none."""
    if key in flags:
        return flags[key]
    found = ((re.search(rf"\b{re.escape(field.rpartition('.')[2])}\b", message), flag) for field, flag in flags.items())
    named = [(match.start(), flag) for match, flag in found if match]
    return min(named)[1] if named else None


#: Flags whose knob only the curriculum reads: with ``--no-curriculum`` a phase rolls out seed tasks, unfiltered.
CURRICULUM_FLAGS = ("--candidates-per-phase", "--value-low", "--value-high", "--fill-filter", "--solved-share")


def refuse_flags_without_effect(given: dict[str, tuple[str, Any]], record: WebRLHyperparams) -> None:
    """A ``typer.BadParameter`` naming a flag given a value that ``record`` never reads: the pipeline would run
    without it and say nothing (``given``: flag -> (hyperparameter, value; None: not given))."""
    asked = {flag for flag, (_, value) in given.items() if value is not None}
    if "--max-attempts" in asked and not record.rollout.min_solved:
        raise typer.BadParameter("a phase retries its unsolved tasks only with --min-solved N (the record's "
                                 "rollout.min_solved is 0)", param_hint="--max-attempts")
    if "--min-solved" in asked and record.rollout.min_solved and record.rollout.max_attempts < 2:
        raise typer.BadParameter("a phase retries its unsolved tasks only with --max-attempts 2 or more (the "
                                 "record's rollout.max_attempts is 1: one attempt, nothing retried)",
                                 param_hint="--min-solved")
    if not record.curriculum.enabled:
        for flag in (f for f in CURRICULUM_FLAGS if f in asked):
            raise typer.BadParameter("the curriculum is off (--no-curriculum): a phase rolls out seed tasks, "
                                     "nothing is generated or filtered", param_hint=flag)


def refuse_flags_a_resume_would_ignore(settings: Settings, run: str, given: dict[str, tuple[str, Any]],
                                       given_options: dict[str, tuple[str, Any]] | None = None,
                                       preset: tuple[str, WebRLHyperparams] | None = None) -> None:
    """A resumed run goes on with the options it started with (:func:`webrl.orchestration.pipeline_state.
    resumed_options`), so a flag that asks for another value would be ignored: a ``typer.BadParameter`` naming each
    such flag, before anything runs. ``given``: flag -> (hyperparameter, value; None: not given); ``given_options``:
    flag -> (a field of the run's options beside its record, as ``seed`` or ``actor``; value, None: not given);
    ``preset``: the preset's name and the record it gives with ``given`` applied, compared field by field (the
    phase count aside: a resume keeps its own unless `--phases` asks another). A run whose ``--actor`` or ``--orm``
    folder now holds another checkpoint than it started with is refused too, naming that flag
    (:func:`webrl.orchestration.pipeline_state.refuse_changed_folders`)."""
    from webrl.orchestration.pipeline_state import changed_on_resume, options_of_run, refuse_changed_folders
    from webrl.wire.contracts import InvalidRequest

    try:
        stored_options = options_of_run(settings, run)
    except InvalidRequest:  # a new run
        return
    stored = stored_options.hyperparams
    flag_of = {key: flag for flag, (key, _) in given.items()}
    changed = changed_on_resume(stored, dict(given.values()))
    asked = [(flag_of[key], f"{new!r}, the run has {key} = {old!r}") for key, (old, new) in changed.items()]
    record = stored_options.to_json()
    asked += [(flag, f"{value!r}, the run has {name} = {record[name]!r}")
              for flag, (name, value) in (given_options or {}).items()
              if value is not None and record[name] != value]
    if preset is not None:
        from dataclasses import asdict

        name, hyperparams = preset
        fields = {f"{group}.{field}": value for group, values in asdict(hyperparams).items()
                  for field, value in values.items()}
        differ = [(key, old, new) for key, (old, new) in changed_on_resume(stored, fields).items()
                  if key not in changed]
        if differ:
            shown = ", ".join(f"{key} = {new!r} (the run: {old!r})" for key, old, new in differ[:3])
            more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
            asked.append((f"--preset {name}", f"{shown}{more}"))
    if asked:
        raise typer.BadParameter(f"run {run!r} resumes with the options it started with: "
                                 + "; ".join(f"{flag} asks {what}" for flag, what in asked)
                                 + ". Leave the flag out to resume it, or start a new --run",
                                 param_hint=asked[0][0].split()[0])
    try:  # the folders at its --actor and --orm paths still hold what the run started with
        refuse_changed_folders(stored_options)
    except InvalidRequest as refused:
        raise typer.BadParameter(str(refused).removeprefix(f"{refused.field}: "),
                                 param_hint=f"--{refused.field}") from None


def check_probe(settings: Settings, probe: Path, flag: str = "--probe") -> None:
    """A ``typer.BadParameter`` naming ``flag`` unless the trainer may read ``probe`` (``webrl.serving.paths``) and
    it is a probe-format file (``webrl.models.probe``: a flips probe, or anchor steps)."""
    from webrl.models.probe import load_probe
    from webrl.serving.paths import requested_model_file
    from webrl.wire.contracts import InvalidRequest

    try:
        requested_model_file(settings, str(probe), flag)
        load_probe(probe)
    except InvalidRequest as refused:
        raise typer.BadParameter(str(refused).removeprefix(f"{flag}: "), param_hint=flag) from None
    except (OSError, ValueError) as exc:  # load_probe's ValueError also names a cut or corrupt gzip
        raise typer.BadParameter(f"{probe} is not a probe file ({exc})", param_hint=flag) from None


def tracking_for(run: str, log_with: str) -> TrackingSpec:
    """Where the run's training metrics go; a tracker whose package is missing, or a run name that cannot be a
    folder or is longer than the database's ``runs.name``, is a ``typer.BadParameter`` (one line)."""
    from pydantic import ValidationError

    from webrl.runs.tracking import missing_package

    problem = missing_package(log_with)
    if problem:
        raise typer.BadParameter(problem, param_hint="--log-with")
    try:
        return TrackingSpec(run=run, log_with=log_with)
    except ValidationError as exc:
        raise typer.BadParameter(f"{run!r} cannot name the run (its database row and its metrics folder): "
                                 f"{exc.errors()[0]['msg']}", param_hint="--run") from None


def default_actor(settings: Settings) -> Path:
    assert settings.artifacts_dir is not None
    return settings.artifacts_dir / "models" / "actor-sft"


def default_orm(settings: Settings) -> Path:
    assert settings.artifacts_dir is not None
    return settings.artifacts_dir / "models" / "orm"


#: The columns a terminal too narrow for the whole table still shows (report.md always has every column).
NARROW_COLUMNS = ("phase", "kept", "reward rate", "test overall", "test subset", "KL exact", "flips", "minutes")
#: ... and, below it, where each phase's minutes went.
MINUTES_COLUMNS = ("phase", "min rollout", "min train", "min eval", "min other", "minutes")


def _table(title: str, header: list[str], body: list[list[str]], columns: list[int]) -> Table:
    table = Table(title=title)
    for i in columns:
        table.add_column(header[i], justify="right")
    for row in body:
        table.add_row(*(row[i] for i in columns))
    return table


def print_phase_table(settings: Settings, run: str) -> None:
    """The run's phase table (in a terminal narrower than the whole table, where rich would cut cells to
    ellipses, only :data:`NARROW_COLUMNS`, then the minutes per stage: :data:`MINUTES_COLUMNS`), each phase's success
    by template group, then the last phase against the SFT actor on the same tasks."""
    from webrl.runs.report import comparison_lines, phase_rows, phase_table, template_table

    rows = phase_rows(settings, run)
    header, body = phase_table(rows)
    table = _table(f"webrl run {run}", header, body, list(range(len(header))))
    unclamped = console.options.update_width(10_000)  # measure() caps at the terminal width otherwise
    if console.measure(table, options=unclamped).maximum > console.width:
        narrow = [i for i, column in enumerate(header) if column in NARROW_COLUMNS]
        console.print(_table(f"webrl run {run} (every column: report.md)", header, body, narrow))
        table = _table("minutes per stage", header, body, [header.index(column) for column in MINUTES_COLUMNS])
    console.print(table)
    template_header, template_body = template_table(rows)
    if template_body:
        console.print(_table("success by template group", template_header, template_body,
                             list(range(len(template_header)))))
    for line in comparison_lines(rows):
        console.print(line, markup=False, highlight=False)


def run_eta(settings: Settings, run: str, hp: WebRLHyperparams) -> RunEta:
    """The estimator of the run's time left, with the stages a resumed run finished before (its phase rows)."""
    from webrl.runs.eta import RunEta, run_plan
    from webrl.runs.report import phase_rows

    return RunEta.of_rows(run_plan(hp), phase_rows(settings, run))


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train(
        preset: str = typer.Option(None, help="Option set: cpu-demo, cpu-long, tiny-demo, smoke or paper."),
        run: str = typer.Option("default", help="Run name; rerunning the same name resumes it."),
        phases: int = typer.Option(None, min=1, help="Number of WebRL phases. On a resume it may also end the run "
                                   "earlier, at a phase not evaluated yet (which then evaluates every test task)."),
        actor: Path = typer.Option(None, help="Starting (SFT) actor folder. Default: artifacts/models/actor-sft."),
        orm: Path = typer.Option(None, help="ORM folder. Default: artifacts/models/orm if present, "
                                            "else rewards come from the sandbox evaluators."),
        curriculum: bool = typer.Option(None, "--curriculum/--no-curriculum", help="Generate tasks from "
                                        "failures. Default: the preset's (on)."),
        replay: bool = typer.Option(None, "--replay/--no-replay", help="Replay earlier phases' successes. Default: "
                                    "the preset's (on)."),
        kl: bool = typer.Option(None, "--kl/--no-kl", help="KL-constrained actor objective. Default: the preset's "
                                "(on)."),
        fill_filter: bool = typer.Option(None, "--fill-filter/--strict-filter", help="Top a phase up with the "
                                         "tasks whose value is nearest the filter's band when too few fall in it."),
        solved_share: float = typer.Option(None, min=0.0, max=1.0, help="Up to this share of a phase's tasks are "
                                           "new instances of the templates of tasks the run has solved, ahead of "
                                           "those grown from failures (0: WebRL's). Default: the preset's."),
        filter_judge: str = typer.Option(None, help="Who values a generated task for the curriculum's filter "
                                         "once a critic exists: critic (its V(start): the paper's) or templates "
                                         "(its template's success in the run's rollouts so far, in every phase). "
                                         "Default: the preset's."),
        tasks_per_phase: int = typer.Option(None, min=1, max=MAX_PARENTS, help="Tasks a phase keeps after the "
                                            "filter and rolls out (paper: ~500; "
                                            f"{DEFAULTS.curriculum.tasks_per_phase} without a preset, fewer in the "
                                            "CPU presets). More tasks: more successes to learn from, and each phase's "
                                            "rollouts, critic and update longer. Default: the preset's."),
        candidates_per_phase: int = typer.Option(None, min=1, max=MAX_GENERATE, help="Tasks generated per phase "
                                                 "before the filter, at least --tasks-per-phase (equal: the filter "
                                                 "keeps every candidate). Default: the preset's."),
        seed: int = typer.Option(None, min=0, max=MAX_SEED, help="Random seed. Default: 0 (a resumed run: its "
                                 "own)."),
        rollout_temperature: float = typer.Option(None, min=0.0, max=MAX_TEMPERATURE, help="Sampling temperature "
                                                  "of the training rollouts (evaluation stays greedy). Default: the "
                                                  "preset's."),
        max_steps: int = typer.Option(None, min=1, max=MAX_EPISODE_STEPS, help="Rollout horizon: actions per "
                                      f"episode at most (paper: {DEFAULTS.rollout.max_steps}). Default: the preset's."),
        actor_lr: float = typer.Option(None, help="The actor's AdamW learning rate "
                                       f"(paper: {DEFAULTS.actor.lr}, an 8B model's full weights; cpu-demo's LoRA "
                                       "adapter: 1e-4). Default: the preset's."),
        actor_epochs: int = typer.Option(None, min=1, help="Passes of the actor's update over a phase's steps with "
                                         f"A > 0 (paper: {DEFAULTS.actor.epochs}). Fewer passes at a larger lr "
                                         "are cheaper but not the same update: on the CPU demo one pass at 3e-4 lost "
                                         "what three at 1e-4 kept. Default: the preset's."),
        beta: float = typer.Option(None, min=0.0, help="beta, weight of the KL constraint of the actor loss "
                                   f"(paper: {DEFAULTS.actor.beta}; the adaptive rule raises it to beta_high)."),
        value_low: float = typer.Option(None, min=0.0, max=1.0, help="Keep generated tasks whose critic value "
                                        f"V >= this (paper: {DEFAULTS.curriculum.value_low})."),
        value_high: float = typer.Option(None, min=0.0, max=1.0, help="... and V <= this "
                                         f"(paper: {DEFAULTS.curriculum.value_high})."),
        replay_cap: int = typer.Option(None, min=0, help="Replayed steps per current step at most "
                                       f"(published code: {DEFAULTS.replay.cap_ratio})."),
        demo_tasks: int = typer.Option(None, min=0, help="Anchor (not in the paper): the sandbox oracle "
                                       "demonstrates this many train tasks in phase 0, and every actor update mixes "
                                       "in demonstration steps (replay.demo_ratio per step with A > 0). Default: "
                                       "the preset's."),
        eval_tasks: int = typer.Option(None, min=1, help="Test tasks each phase evaluates: the first N of the test "
                                       f"split (default {DEFAULTS.evaluation.tasks}: WebArena-Lite's; `webrl eval` "
                                       "evaluates a published checkpoint on all of them later)."),
        critic_backbone: bool = typer.Option(None, "--critic-backbone/--critic-heads-only", help="Train the "
                                             "critic's backbone with its value heads (WebRL), or only the heads on "
                                             "the frozen backbone, each state encoded once (cheap on a CPU). "
                                             "Default: the preset's."),
        critic_start: str = typer.Option(None, help="Where a fresh critic's backbone starts on an adapter actor: "
                                         "actor (a copy of the SFT actor's adapter: the paper's critic) or base "
                                         "(a new adapter on the base's states). Default: the preset's."),
        report: Path = typer.Option(None, callback=lambda report: check_output_folder(report, "--report"),
                                    help="Report folder. Default: artifacts/reports/<run>."),
        log_with: LogWith = typer.Option("tensorboard", help="Where training metrics go: TensorBoard event files "
                                         "in artifacts/tensorboard/<run> (the default), or W&B / MLflow (the "
                                         "wandb / mlflow extras: pip install -e .\\[wandb])."),
        screenshots: bool = typer.Option(None, "--screenshots/--no-screenshots", help="Store a screenshot of "
                                         "every rollout step for `webrl ui` (costs time: bench/browser_pool.py). "
                                         "Default: off."),
        objective: str = typer.Option(None, help="The actor objective: smooth-l1 (the published trainer's, on "
                                      "A > 0 steps) or squared (the paper's, on every step). Default: the preset's."),
        failed_positives: str = typer.Option(None, help="A > 0 steps of reward-0 trajectories: keep, confident "
                                             "(only where the critic's A >= actor.failed_margin) or drop. Default: "
                                             "the preset's."),
        min_new_positive_steps: int = typer.Option(None, min=0, help="Update the actor only in a phase whose own "
                                                   "rollouts give at least this many steps with A > 0 (fewer: "
                                                   "published unchanged; 0: always). Default: the preset's."),
        validation_tasks: int = typer.Option(None, min=0, help="Publish a phase's updated actor only when, greedy on "
                                             "this many train-split tasks, it has not lost significantly more than "
                                             "it gained against its start actor (sign test; else the start actor "
                                             "is published again; 0: always). Default: the preset's."),
        validation_alpha: float = typer.Option(None, min=0.0, max=1.0, help="The level of --validation-tasks' sign "
                                               "test. Default: the preset's."),
        validation_margin: int = typer.Option(None, min=0, help="Refuse as well an update that lost more than this "
                                              "many of the --validation-tasks net of those it gained "
                                              "(non-inferiority; unset: the sign test alone). Default: the preset's."),
        min_positive_confidence: float = typer.Option(None, min=0.0, max=1.0, help="Leave out of the actor's update "
                                                      "the A > 0 steps the phase's start actor takes with confidence "
                                                      "exp(lp / n) at or below this (0: keep all). Default: the "
                                                      "preset's."),
        max_positive_confidence: float = typer.Option(None, min=0.0, max=1.0, help="... and those above this (1: "
                                                      "keep all). Default: the preset's."),
        min_solved: int = typer.Option(None, min=0, help="Try a phase's unsolved tasks again (the next attempt) "
                                       "until this many of its tasks are solved or --max-attempts ran (0: one "
                                       "attempt, the paper). Default: the preset's."),
        max_attempts: int = typer.Option(None, min=1, help="At most this many attempts at a task in one phase "
                                         "(with --min-solved). Default: the preset's."),
        optimizer_state: str = typer.Option(None, help="The actor's AdamW state at a phase's start: reset (fresh, "
                                            "as the published scripts) or keep (the previous phase's moments and "
                                            "step count). Default: the preset's (reset)."),
        probe: Path = typer.Option(None, help="A flips probe of the starting actor (`webrl probe build`; the "
                                   "shipped SFT actor's is webrl/assets/probe-smollm2.jsonl.gz): each phase records "
                                   "the share of its steps whose greedy action changed."),
        anchor_kl: float = typer.Option(None, min=0.0, help="lambda of the anchor (not in the paper): each actor "
                                        "batch adds lambda * the exact KL to the phase's start actor on --anchors "
                                        "steps, holding the policy on templates the phase does not train (0: "
                                        "none). Default: the preset's."),
        anchors: Path = typer.Option(None, help="Anchor steps for --anchor-kl (`webrl probe anchors`; the "
                                     "shipped SFT actor's are webrl/assets/anchors-smollm2.jsonl.gz)."),
        intent_contrast: float = typer.Option(None, min=0.0, help="lambda_c of the intent contrast (not in the "
                                              "paper): each positive step's action, under the intent of a train "
                                              "task of another template, may not become more likely than under the "
                                              "phase's start actor (0: off). Default: the preset's."),
        stop_contrast: float = typer.Option(None, min=0.0, help="lambda_s of the stop contrast (not in the paper): "
                                            "a positive step that ends its episode may not make that action more "
                                            "likely at the earlier states of its own trajectory than the phase's "
                                            "start actor was (0: off). Default: the preset's."),
        renumbered_positives: int = typer.Option(None, min=0, help="Copies of each positive step with the page's "
                                                 "element ids renumbered in state and action, trained with its "
                                                 "advantage (not in the paper; 0: off). Default: the preset's."),
        activation_checkpointing: bool = typer.Option(None, "--activation-checkpointing/--keep-activations",
                                                      help="Recompute the updates' activations in the backward "
                                                      "(about half the memory: a cpu-demo phase's update peaks at "
                                                      "~4 GB instead of ~9), or keep them (1.27x faster, the same "
                                                      "update). Default: the preset's (cpu-demo keeps them)."),
        kl_bound: float = typer.Option(None,
                                       help="The most exact KL(pi_ref || pi_theta) per action token an actor update "
                                       "may reach, as the mean over an epoch's worth of batches (not in the "
                                       "paper): the first batch that takes it above ends the update, without its "
                                       "step. Default: the preset's (none)."),
    ) -> None:
        """Run every WebRL phase (generate, filter, roll out, label, train, validate, evaluate); resumes after a
        crash."""
        from webrl.orchestration.pipeline import Pipeline, PipelineOptions, StageReport
        from webrl.runs.report import write_report
        from webrl.runs.tracking import Tracker
        from webrl.wire.contracts import InvalidRequest

        settings = get_settings()
        tracking = tracking_for(run, log_with)
        actor_path = actor or default_actor(settings)
        if not is_model_folder(actor_path):
            raise typer.BadParameter(f"no model at {actor_path}; run `webrl bootstrap` first", param_hint="--actor")
        check_model_files(actor_path, "--actor")
        orm_path = orm or (default_orm(settings) if is_model_folder(default_orm(settings)) else None)
        if orm is not None:
            check_model_folder(orm, "--orm")
        check_loadable(settings, actor_path, "--actor", configured=settings.actor.model)
        if orm_path is not None:  # the ORM service loads only folders a request may name (webrl.serving.paths)
            check_loadable(settings, orm_path, "--orm", configured=settings.orm.model)
        given = {  # flag: (hyperparameter, value; None where the flag was not given)
            "--phases": ("curriculum.phases", phases), "--curriculum": ("curriculum.enabled", curriculum),
            "--fill-filter": ("curriculum.fill_filter", fill_filter),
            "--solved-share": ("curriculum.solved_share", solved_share),
            "--filter-judge": ("curriculum.filter_judge", filter_judge),
            "--tasks-per-phase": ("curriculum.tasks_per_phase", tasks_per_phase),
            "--candidates-per-phase": ("curriculum.candidates_per_phase", candidates_per_phase),
            "--value-low": ("curriculum.value_low", value_low), "--value-high": ("curriculum.value_high", value_high),
            "--rollout-temperature": ("rollout.temperature", rollout_temperature),
            "--max-steps": ("rollout.max_steps", max_steps), "--min-solved": ("rollout.min_solved", min_solved),
            "--max-attempts": ("rollout.max_attempts", max_attempts), "--replay": ("replay.enabled", replay),
            "--replay-cap": ("replay.cap_ratio", replay_cap), "--demo-tasks": ("replay.demo_tasks", demo_tasks),
            "--kl": ("actor.kl", kl), "--beta": ("actor.beta", beta), "--actor-lr": ("actor.lr", actor_lr),
            "--actor-epochs": ("actor.epochs", actor_epochs), "--objective": ("actor.objective", objective),
            "--failed-positives": ("actor.failed_positives", failed_positives),
            "--min-new-positive-steps": ("actor.min_new_positive_steps", min_new_positive_steps),
            "--validation-tasks": ("evaluation.validation_tasks", validation_tasks),
            "--validation-alpha": ("evaluation.validation_alpha", validation_alpha),
            "--validation-margin": ("evaluation.validation_margin", validation_margin),
            "--min-positive-confidence": ("actor.min_positive_confidence", min_positive_confidence),
            "--max-positive-confidence": ("actor.max_positive_confidence", max_positive_confidence),
            "--optimizer-state": ("actor.optimizer_state", optimizer_state),
            "--anchor-kl": ("actor.anchor_kl", anchor_kl),
            "--intent-contrast": ("actor.intent_contrast", intent_contrast),
            "--stop-contrast": ("actor.stop_contrast", stop_contrast),
            "--renumbered-positives": ("actor.renumbered_positives", renumbered_positives),
            "--kl-bound": ("actor.kl_bound", kl_bound),
            "--critic-backbone": ("critic.train_backbone", critic_backbone),
            "--critic-start": ("critic.backbone_start", critic_start),
            "--activation-checkpointing": ("batching.gradient_checkpointing", activation_checkpointing),
            "--eval-tasks": ("evaluation.tasks", eval_tasks),
        }
        hyperparams = hyperparams_for(preset, dict(given.values()), {key: flag for flag, (key, _) in given.items()})
        refuse_flags_without_effect(given, hyperparams)
        options = PipelineOptions(run=run, actor=str(actor_path.resolve()),
                                  orm=str(orm_path.resolve()) if orm_path else "", seed=seed or 0,
                                  hyperparams=hyperparams, screenshots=bool(screenshots),
                                  probe=str(probe.resolve()) if probe else "",
                                  anchors=str(anchors.resolve()) if anchors else "")
        if probe is not None:
            check_probe(settings, probe)
        if anchors is not None:
            check_probe(settings, anchors, "--anchors")
        elif hyperparams.actor.anchor_kl > 0:
            raise typer.BadParameter(f"actor.anchor_kl is {hyperparams.actor.anchor_kl}: name the anchor steps it "
                                     "holds the policy on (`webrl probe anchors`)", param_hint="--anchors")
        ensure_ready(settings)
        given_options = {"--seed": ("seed", seed), "--screenshots": ("screenshots", screenshots),
                         "--actor": ("actor", options.actor if actor is not None else None),
                         "--orm": ("orm", options.orm if orm is not None else None),
                         "--probe": ("probe", options.probe or None), "--anchors": ("anchors", options.anchors or None)}
        refuse_flags_a_resume_would_ignore(settings, run, given, given_options,
                                           preset=(preset, hyperparams) if preset else None)

        tracker = Tracker(settings, tracking, "pipeline")
        shown_progress: list[RichProgress] = []  # the display on_stage also feeds (made with the Progress below)

        def on_stage(r: StageReport) -> None:
            shown = {k: v for k, v in r.metrics.items() if not isinstance(v, list | dict) and "path" not in k}
            console.print(f"[green]phase {r.phase} {r.stage}[/green] {shown}")
            tracker.scalars(r.metrics, step=r.phase, prefix=f"{r.stage}/")
            for display in shown_progress:
                display.stage_done(r.phase, r.stage, r.metrics)

        from webrl.policies.actor_service import ActorNotServing

        try:
            with sandbox_if_needed(settings), _progress() as progress, tracker:
                display = RichProgress(progress)
                shown_progress.append(display)
                try:
                    pipeline = Pipeline(settings, options, on_progress=display, on_stage=on_stage,
                                        tracking=tracking, end_at=phases)
                except InvalidRequest as refused:  # --phases ends it too early; its --actor or --orm folder changed
                    raise typer.BadParameter(str(refused).removeprefix(f"{refused.field}: "),
                                             param_hint=f"--{refused.field}") from None
                display.follow(run_eta(settings, options.run, pipeline.hp))
                pipeline.run()
        except ActorNotServing as exc:
            console.print(f"[red]error:[/red] {exc}", soft_wrap=True)
            raise typer.Exit(1) from exc
        print_phase_table(settings, options.run)
        assert settings.artifacts_dir is not None
        out = write_report(settings, options.run, report or settings.artifacts_dir / "reports" / options.run)
        console.print(f"report: {out}")

    @app.command("eval")
    def evaluate(
        actor: Path = typer.Option(None, help="Actor folder (Hugging Face format)."),
        run: str = typer.Option(None, help="Instead of --actor: a `webrl train` run, whose --phase actor is "
                                "evaluated with the run's horizon, early stops and concurrency; the result becomes "
                                "that phase's evaluation in the run's table and report (for runs trained with few "
                                "--eval-tasks)."),
        phase: int = typer.Option(None, min=0, help="With --run: the phase (default: the last that evaluated)."),
        stratified: int = typer.Option(None, min=1, help="With --run: only the run's fixed stratified sample of N "
                                       "test tasks (the sample its middle phases evaluate when N is the preset's "
                                       "evaluation subset, 40 for cpu-demo)."),
        split: str = typer.Option("test", callback=check_split, help="Task split of the built-in suite."),
        tasks: Path = typer.Option(None, help="A JSON file of WebArena task configs (e.g. WebArena-Lite)."),
        limit: int = typer.Option(None, min=1, help="Evaluate only the first N tasks."),
        concurrency: int = typer.Option(4, min=1, max=MAX_CONCURRENCY, help="Concurrent browser episodes (--run: "
                                        "the run's own)."),
        max_steps: int = typer.Option(None, min=1, max=MAX_EPISODE_STEPS, help="Episode horizon (default "
                                      f"{DEFAULTS.rollout.max_steps}, WebRL's; the CPU presets use 8-10)."),
        screenshots: bool = typer.Option(True, "--screenshots/--no-screenshots", help="Store a downscaled "
                                         "screenshot of every step beside its trajectory (shown by `webrl ui`)."),
    ) -> None:
        """Success rate of an actor per site through the evaluator harness."""
        from webrl.orchestration.evaluate import evaluate_actor

        settings = get_settings()
        if run is not None:
            _evaluate_run_phase(settings, run, phase, limit=limit, stratified=stratified, refused={
                "--actor": actor is not None, "--tasks": tasks is not None, "--split": split != "test",
                "--max-steps": max_steps is not None})
            return
        if actor is None:
            raise typer.BadParameter("name the actor folder to evaluate, or --run", param_hint="--actor")
        for flag, value in (("--phase", phase), ("--stratified", stratified)):
            if value is not None:
                raise typer.BadParameter(f"{flag} applies to --run", param_hint=flag)
        check_model_folder(actor, "--actor")
        check_loadable(settings, actor, "--actor", configured=settings.actor.model)
        if tasks is not None and not tasks.exists():
            raise typer.BadParameter(f"{tasks} does not exist", param_hint="--tasks")
        if tasks is not None:
            check_task_file(settings, tasks)
        ensure_ready(settings)
        with sandbox_if_needed(settings), _progress() as progress:
            result = evaluate_actor(settings, actor, split=split, tasks_file=tasks, limit=limit,
                                    concurrency=concurrency, max_steps=max_steps, screenshots=screenshots,
                                    on_progress=RichProgress(progress))
        table = Table(title=f"success of {actor.name}")
        table.add_column("site")
        table.add_column("tasks", justify="right")
        table.add_column("success", justify="right")
        for site, (n, rate) in sorted(result.items()):
            table.add_row(site, str(n), f"{100 * rate:.1f}%")
        console.print(table)
        if tasks is None:
            print_template_groups(settings, actor, split=split, limit=limit, max_steps=max_steps)


def check_task_file(settings: Settings, tasks: Path) -> None:
    """Refuse ``webrl eval --tasks`` before anything starts: a file that is no task list is one line naming the entry
    and field (:func:`webrl.agent.schemas.load_task_file`); one without tasks, or with an entry whose start URL no
    episode may open (not http(s), or its host off the browser allow-list), a ``typer.BadParameter`` naming the
    entry and the URL (:func:`webrl.safety.allow_list.first_refused`, as ``webrl pages check``)."""
    from webrl.agent.schemas import load_task_file
    from webrl.commands.pages import ALLOW_LIST_HINT
    from webrl.safety.allow_list import first_refused

    configs = load_task_file(tasks)
    if not configs:
        raise typer.BadParameter(f"{tasks} holds no task configs", param_hint="--tasks")
    allowed = settings.host_allow_list()
    for index, config in enumerate(configs):
        if problem := first_refused(config.start_urls(settings), allowed):
            raise typer.BadParameter(f"{tasks}: entry {index} (task_id {config.task_id!r}): {problem} "
                                     f"({ALLOW_LIST_HINT})", param_hint="--tasks")


def print_template_groups(settings: Settings, actor: Path, *, split: str, limit: int | None,
                          max_steps: int | None) -> None:
    """After ``webrl eval`` on the suite's tasks: the actor's success on the seen-template and the held-out-template
    tasks and the macro average over templates (:mod:`webrl.method.template_split`); nothing when a task's
    template is unknown."""
    from webrl.db import repository as repo
    from webrl.db.session import session_scope
    from webrl.method.template_split import group_success
    from webrl.orchestration.evaluate import EVAL_PHASE, evaluation_attempt
    from webrl.runs.report import group_rows
    from webrl.store.template_groups import evaluation_solved, template_groups

    with session_scope(settings) as s:
        keys = [t.key for t in repo.tasks_where(s, split=split)]
    keys = keys[:limit] if limit else keys
    groups = template_groups(settings)
    if not groups.covers(keys):
        return
    solved = evaluation_solved(settings, keys, phase=EVAL_PHASE, attempt=evaluation_attempt(settings, actor, max_steps))
    header, body = group_rows(group_success(keys, groups, solved))
    console.print(_table(f"success of {actor.name} by template group", header, body, list(range(len(header)))))


def _evaluate_run_phase(settings: Settings, run: str, phase: int | None, *, limit: int | None,
                        stratified: int | None, refused: dict[str, bool]) -> None:
    """``webrl eval --run``: evaluate one phase of a stored run on the test tasks and make the result that phase's
    evaluation (:meth:`webrl.orchestration.pipeline.Pipeline.evaluate_in_full`), then show the run's table and
    rewrite its report."""
    from webrl.orchestration.pipeline import Pipeline
    from webrl.runs.report import write_report
    from webrl.wire.contracts import InvalidRequest

    given = [flag for flag, is_given in refused.items() if is_given]
    if given:
        raise typer.BadParameter(f"--run evaluates the run's own actor on the test tasks with its own horizon; "
                                 f"leave out {', '.join(given)}", param_hint=given[0])
    ensure_ready(settings)
    with sandbox_if_needed(settings), _progress() as progress:
        try:
            pipeline = Pipeline.of_run(settings, run, on_progress=RichProgress(progress))
            index = phase if phase is not None else max(pipeline.evaluated_phases(), default=0)
            metrics = pipeline.evaluate_in_full(index, tasks=limit, stratified=stratified)
        except InvalidRequest as refused_request:
            field = refused_request.field
            raise typer.BadParameter(str(refused_request).removeprefix(f"{field}: "), param_hint=f"--{field}") from None
    console.print(f"run {run} phase {index}: {100 * metrics['success']:.1f}% of {metrics['n']} test tasks")
    print_phase_table(settings, run)
    assert settings.artifacts_dir is not None
    console.print(f"report: {write_report(settings, run, settings.artifacts_dir / 'reports' / run)}")

