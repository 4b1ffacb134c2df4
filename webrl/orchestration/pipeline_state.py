"""What a pipeline run keeps between its stages and across restarts: the run's options (``runs.options``) and,
per phase, the stages finished, what they hand the later ones (:class:`PhaseState`) and what they measured
(``phases`` rows). :class:`RunStore` is the only writer of those rows; :mod:`webrl.orchestration.pipeline` runs
the stages and records each one here after its own writes commit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.method.hyperparams import WebRLHyperparams, as_stored, with_overrides
from webrl.method.rewards import EVALUATOR_LABELS
from webrl.wire.contracts import InvalidRequest


@dataclass(frozen=True)
class PipelineOptions:
    """Everything a run depends on; stored with the run (:meth:`to_json`) so a resume uses the same values."""

    __pydantic_config__ = ConfigDict(extra="forbid")

    run: str = "default"
    """Run name; rerunning the same name resumes it."""
    actor: str = ""
    """Path of the starting (SFT) actor, a Hugging Face folder."""
    orm: str = ""
    """Path of the ORM checkpoint; "" = rewards from the sandbox evaluators."""
    seed: int = 0
    """Seed of every sample the run draws (tasks, generation, training)."""
    hyperparams: WebRLHyperparams = field(default_factory=WebRLHyperparams)
    """The method's knobs and the run's scale (``webrl.method.hyperparams``; a preset is one)."""
    screenshots: bool = False
    """Store a screenshot of every rollout step (``webrl.store.screenshots``) for the viewer; costs browser time."""
    probe: str = ""
    """A flips probe of the starting actor (``webrl probe build``); "" = flips not measured."""
    anchors: str = ""
    """Anchor steps for ``actor.anchor_kl`` (``webrl probe anchors``); "" = none (the anchor needs them)."""
    actor_sha256: str | None = None
    """What the ``actor`` folder held when the run was created: its content sha256 (:func:`content_identity`, the
    identity an evaluation stores an actor under). None: not recorded (a run stored before webrl recorded it, or no
    folder there); such a run resumes unchecked."""
    orm_checkpoint_version: str | None = None
    """What the ``orm`` folder held when the run was created: the version it declared (:func:`orm_identity`), the
    one the run's rewards are stored under. None: not recorded (no ORM, a run stored before webrl recorded it)."""
    orm_sha256: str | None = None
    """The ``orm`` folder's content sha256 when the run was created (:func:`content_identity`): an ORM retrained
    under the same version (its folder deleted, the same job run again) is another ORM all the same. None: not
    recorded (no ORM, a run stored before webrl recorded it)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def orm_version(self) -> str:
        """The version the run's rewards are stored under: its ORM's (recorded when the run was created; for a run
        stored without it, the one the folder declares now), or the sandbox evaluators' when the run has no ORM."""
        if not self.orm:
            return EVALUATOR_LABELS
        if self.orm_checkpoint_version:
            return self.orm_checkpoint_version
        from webrl.models.loading import checkpoint_version

        return checkpoint_version(self.orm)

    def with_folder_identities(self) -> PipelineOptions:
        """These options with what their actor and ORM folders hold now recorded (a new run's)."""
        return replace(self, actor_sha256=content_identity(self.actor), orm_checkpoint_version=orm_identity(self.orm),
                       orm_sha256=content_identity(self.orm))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineOptions:
        """Options stored by :meth:`to_json`, validated: unknown keys are errors; a hyperparameter record stored before
        one of its fields existed reads as it ran (:func:`webrl.method.hyperparams.as_stored`)."""
        if isinstance(data.get("hyperparams"), dict):
            data = {**data, "hyperparams": as_stored(data["hyperparams"])}
        return TypeAdapter(cls).validate_python(data)


class PhaseState(BaseModel):
    """What the stages of one phase hand each other (stored in ``phases.state``)."""

    model_config = ConfigDict(extra="forbid")

    candidate_keys: list[str] = []  # generate -> filter: the new tasks
    kept_keys: list[str] = []  # filter -> rollout: the tasks this phase trains on
    actor_path: str | None = None  # train -> next phase: the actor it published (or carried over)
    actor_version: str | None = None
    critic_path: str | None = None  # train -> next phase: the critic it published (or carried over)
    critic_version: str | None = None

    def with_(self, **changes: Any) -> Self:
        """A copy with ``changes``, validated (an unknown field is an error)."""
        return self.model_validate({**self.model_dump(), **changes})


def content_identity(path: str) -> str | None:
    """The content sha256 of the model folder ``path`` (:func:`webrl.store.checkpoints.cached_content_sha256`, what
    :func:`webrl.store.evaluations.evaluation_key` keys an actor by; for an adapter it also names the base); None
    when ``path`` is no folder or cannot be read as one."""
    from webrl.store.checkpoints import cached_content_sha256

    folder = Path(path)
    if not path or not folder.is_dir():
        return None
    try:
        return cached_content_sha256(folder)
    except (OSError, ValueError):  # an unreadable file, a JSON file that is not JSON: no model either
        return None


def orm_identity(path: str) -> str | None:
    """The checkpoint version the ORM folder ``path`` declares (its manifest's; else the folder's name), the version
    its labels are stored under; None when ``path`` is no folder."""
    if not path or not Path(path).is_dir():
        return None
    from webrl.models.loading import checkpoint_version

    return checkpoint_version(path)


def refuse_changed_folders(options: PipelineOptions, *, actor: bool = True) -> None:
    """``InvalidRequest`` on "orm" (or "actor") when the run's ORM folder (start actor folder) now holds another
    checkpoint than the run was created with (:attr:`PipelineOptions.orm_checkpoint_version` and
    :attr:`PipelineOptions.orm_sha256`, :attr:`PipelineOptions.actor_sha256`): republished in place by ``webrl
    train-orm`` or ``webrl bootstrap``, under another version or retrained under the same one. A resume would
    otherwise label with another ORM than the earlier phases' labels (which it then no longer sees, or takes for
    this ORM's), or train another actor than the one whose rollouts it has. Nothing is checked where nothing was
    recorded or no folder is there. ``actor=False``: the ORM only (the actor's hash reads its every file; the ORM's
    is read once a process while its files stay as they are)."""
    stored_orm = options.orm_checkpoint_version
    orm_now = orm_identity(options.orm) if stored_orm else None
    if stored_orm and orm_now is not None and orm_now != stored_orm:
        raise _folder_changed(options, "orm", f"checkpoint version {stored_orm}", f"checkpoint version {orm_now}",
                              "`webrl train-orm`", "its earlier labels are stored under the ORM it started with")
    orm_sha_now = content_identity(options.orm) if options.orm_sha256 else None
    if options.orm_sha256 and orm_sha_now is not None and orm_sha_now != options.orm_sha256:
        raise _folder_changed(options, "orm", f"content sha256 {options.orm_sha256[:12]}",
                              f"content sha256 {orm_sha_now[:12]} under the same version", "`webrl train-orm`",
                              "its earlier labels were made by the ORM it started with")
    stored_actor = options.actor_sha256 if actor else None
    actor_now = content_identity(options.actor) if stored_actor else None
    if stored_actor and actor_now is not None and actor_now != stored_actor:
        raise _folder_changed(options, "actor", f"content sha256 {stored_actor[:12]}", f"content sha256 "
                              f"{actor_now[:12]}", "`webrl bootstrap`", "its rollouts were made by the actor it "
                              "started with")


def _folder_changed(options: PipelineOptions, flag: str, stored: str, now: str, writer: str,
                    why: str) -> InvalidRequest:
    """The refusal of a resume whose ``--<flag>`` folder holds ``now`` where the run recorded ``stored``."""
    path = getattr(options, flag)
    return InvalidRequest(flag, f"run {options.run!r} started with --{flag} {path} at {stored}, but that folder now "
                          f"holds {now} (republished since, by {writer}?), and {why}. Put that checkpoint back at "
                          f"{path} to resume the run, or start a new --run")


#: A stage's answer: its metrics (for reporting) and the phase state after it.
StageOutput = tuple[dict[str, Any], PhaseState]


@dataclass
class StageReport:
    """What a stage tells the progress display."""

    phase: int
    stage: str
    metrics: dict[str, Any]


def stored_options(run: str, stored_json: dict[str, Any]) -> PipelineOptions:
    """The options run ``run`` was stored with, or a ``RuntimeError`` saying why this webrl cannot read them."""
    try:
        return PipelineOptions.from_json(stored_json)
    except ValidationError as exc:
        raise RuntimeError(f"run {run!r} was stored with options this webrl cannot read "
                           f"(an older layout?); start it under a new --run name.\n{exc}") from exc


def stored_run_names(settings: Settings) -> list[str]:
    """The names of the runs stored here, oldest first (an unmigrated database stores none)."""
    with session_scope(settings) as s:
        if not inspect(s.get_bind()).has_table(m.Run.__tablename__):
            return []
        return list(s.scalars(select(m.Run.name).order_by(m.Run.id)))


def unknown_run(run: str, names: list[str]) -> InvalidRequest:
    """The refusal of a run name that is not stored, listing the ones that are."""
    return InvalidRequest("run", f"no run named {run!r}; the runs stored here: {', '.join(names) or 'none'}")


def options_of_run(settings: Settings, run: str) -> PipelineOptions:
    """The options the stored run ``run`` was started with; ``InvalidRequest`` on "run" when no run has that
    name."""
    with session_scope(settings) as s:
        stored = s.scalar(select(m.Run.options).where(m.Run.name == run))
    if stored is None:
        raise unknown_run(run, stored_run_names(settings))
    return stored_options(run, stored)


def resumed_options(options: PipelineOptions, stored_json: dict[str, Any], started: dict[int, list[str]],
                    end_at: int | None) -> PipelineOptions:
    """A resume keeps the options the run started with, the phase count too, unless ``end_at`` (``--phases N``)
    asks another: a larger one grows the run, a smaller one ends it earlier, at a phase that has not evaluated yet
    (that phase then evaluates all the test tasks, as a last phase does). Nothing else in ``options`` moves it: a
    resume without a preset would otherwise take the defaults' count. ``started``: each phase's finished stages."""
    stored = stored_options(options.run, stored_json)
    phases = stored.hyperparams.curriculum.phases
    if end_at is not None and end_at < phases:
        later = sorted(i for i, stages in started.items() if i > end_at and stages)
        if later or "evaluate" in started.get(end_at, []):
            raise InvalidRequest("phases", f"run {options.run!r} cannot end at phase {end_at}: "
                                 + (f"phase {later[0]} has started" if later else
                                    f"phase {end_at} has already evaluated (a subset of the test tasks)"))
    phases = phases if end_at is None else end_at
    return replace(stored, hyperparams=with_overrides(stored.hyperparams, {"curriculum.phases": phases}))


def changed_on_resume(stored: WebRLHyperparams, given: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The hyperparameters ``given`` (``{"group.field": value}``, None: not given) sets otherwise than the stored
    run's ``stored`` does, as ``{key: (stored value, given value)}``: a resume would ignore them
    (:func:`resumed_options`). The phase count is not among them: a resume may grow it or end the run earlier."""
    record = asdict(stored)
    changed = {}
    for key, value in given.items():
        group, _, name = key.partition(".")
        if value is not None and key != "curriculum.phases" and record[group][name] != value:
            changed[key] = (record[group][name], value)
    return changed


class RunStore:
    """The stored progress of one run: its row in ``runs`` and one row in ``phases`` per phase begun."""

    def __init__(self, settings: Settings, run_id: int) -> None:
        self.settings = settings
        self.run_id = run_id

    @classmethod
    def open(cls, settings: Settings, options: PipelineOptions,
             end_at: int | None = None) -> tuple[RunStore, PipelineOptions]:
        """The run named ``options.run``, created with ``options`` when new (and what its actor and ORM folders hold,
        :meth:`PipelineOptions.with_folder_identities`); a stored run keeps its own options (:func:`resumed_options`,
        which are stored back), refused (``InvalidRequest`` on "actor" or "orm", nothing stored changed) when one of
        those folders now holds another checkpoint (:func:`refuse_changed_folders`). The store and the options the
        run goes on with."""
        from webrl.db.repository import insert_once

        with session_scope(settings) as s:
            run = cls._run(s, options.run)
            if run is None:
                new = options.with_folder_identities()
                created = m.Run(name=new.run, options=new.to_json())
                run = insert_once(s, created, lambda: cls._run(s, options.run))
                if run is created:
                    return cls(settings, run.id), new
            # stored, or created meanwhile by a concurrent open of the same name (whose options it then keeps)
            return cls(settings, run.id), cls._resumed(s, run, options, end_at)

    @staticmethod
    def _run(s: Session, name: str) -> m.Run | None:
        return s.scalar(select(m.Run).where(m.Run.name == name))

    @staticmethod
    def _resumed(s: Session, run: m.Run, options: PipelineOptions, end_at: int | None) -> PipelineOptions:
        """The options stored run ``run`` goes on with (:func:`resumed_options`), stored back; refused when its
        folders changed (:func:`refuse_changed_folders`)."""
        phases = s.scalars(select(m.Phase).where(m.Phase.run_id == run.id))
        started = {p.index: list(p.stages_done) for p in phases}
        options = resumed_options(options, run.options, started, end_at)
        refuse_changed_folders(options)  # the actor's hash reads its every file, once per process
        run.options = options.to_json()
        return options

    def phase_row(self, s: Session, index: int) -> m.Phase:
        """Phase ``index``'s row, created (no stage done) when the phase has none yet (or the one a concurrent
        writer created meanwhile)."""
        from webrl.db.repository import insert_once

        row = self._phase(s, index)
        if row is None:
            row = insert_once(s, m.Phase(run_id=self.run_id, index=index, stages_done=[], metrics={}),
                              lambda: self._phase(s, index))
        return row

    def _phase(self, s: Session, index: int) -> m.Phase | None:
        return s.scalar(select(m.Phase).where(m.Phase.run_id == self.run_id, m.Phase.index == index))

    def stages_done(self, index: int) -> list[str]:
        with session_scope(self.settings) as s:
            return list(self.phase_row(s, index).stages_done)

    def evaluated_phases(self) -> list[int]:
        """The phases whose evaluate stage has finished, in order (read only: no phase row is created)."""
        with session_scope(self.settings) as s:
            rows = s.scalars(select(m.Phase).where(m.Phase.run_id == self.run_id).order_by(m.Phase.index))
            return [row.index for row in rows if "evaluate" in row.stages_done]

    def phase_metrics(self, index: int) -> dict[str, Any]:
        with session_scope(self.settings) as s:
            return dict(self.phase_row(s, index).metrics)

    def phase_state(self, index: int) -> PhaseState:
        with session_scope(self.settings) as s:
            return PhaseState.model_validate(self.phase_row(s, index).state or {})

    def finish_stage(self, index: int, stage: str, output: StageOutput, last: bool) -> None:
        """Record ``stage`` of phase ``index`` as done: its state, its metrics (as ``<stage>.<name>``), and, when
        it is the phase's ``last``, the phase as done."""
        metrics, state = output
        with session_scope(self.settings) as s:
            row = self.phase_row(s, index)
            row.state = state.model_dump(mode="json")
            row.metrics = {**row.metrics, **{f"{stage}.{k}": v for k, v in metrics.items()}}
            row.stages_done = [*row.stages_done, stage]
            if last:
                row.status = "done"
                row.finished_at = datetime.now(UTC)

    def replace_evaluation(self, index: int, metrics: dict[str, Any]) -> None:
        """Phase ``index``'s evaluate metrics replaced by ``metrics`` (a later evaluation), except
        ``evaluate.seconds``, the run's own time."""
        with session_scope(self.settings) as s:
            row = self.phase_row(s, index)
            kept = {k: v for k, v in row.metrics.items() if not k.startswith("evaluate.") or k == "evaluate.seconds"}
            row.metrics = {**kept, **{f"evaluate.{k}": v for k, v in metrics.items()}}
