"""What the viewer shows, read from the database. Every function takes an open session (the viewer's are
read-only: :func:`webrl.db.session.read_only_scope`) and returns plain records for the templates.

Runs and phases come from ``runs`` / ``phases`` (the report's rows, :func:`webrl.runs.report.phase_rows_in`); a
phase's generated tasks from its :class:`webrl.orchestration.pipeline.PhaseState` (candidates, kept) with their lineage
(``tasks.parent_id``) and the values the filter stored (``critic_values`` under the filter's judge);
trajectories, steps and labels from their tables. A trajectory carries its phase and the run that rolled it out
(``trajectories.run_id``; 0, none, for stand-alone rollouts such as ``webrl eval``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from webrl.agent.actions import ActionParseError, parse_action
from webrl.db import models as m
from webrl.db.repository import label_of
from webrl.method.hyperparams import DEFAULTS
from webrl.method.rewards import SUCCESS_SCORE
from webrl.orchestration.pipeline import BASELINE_STAGES, STAGES, PhaseState, PipelineOptions
from webrl.runs.report import phase_rows_in
from webrl.wire.contracts import DB_MAX_INT

PAGE_SIZE = 50  # trajectories per page of the list
#: The last page a request may ask for: its offset still fits a signed 32-bit integer.
MAX_PAGE = DB_MAX_INT // PAGE_SIZE
LOGPROB_BUCKETS = 10  # heat-map colours: token probability p = exp(log p) in tenths
Outcome = Literal["success", "failure", "unscored"]


# ---------------------------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class RunSummary:
    name: str
    created_at: datetime
    phases_planned: int | None  # phase 0 (the SFT actor) and phases 1..N; None when the options do not read
    phases_done: int
    current: str | None  # "phase 2: rollout" while a stage is due; None once every planned phase is done
    success: float | None  # test success of the last evaluated phase


def _options(run: m.Run) -> PipelineOptions | None:
    try:
        return PipelineOptions.from_json(run.options or {})
    except ValidationError:  # a run stored by another webrl version: shown without its plan
        return None


def _current_stage(phases: list[m.Phase], planned: int | None) -> str | None:
    """The stage a run is at: the first one not done of its first unfinished phase, or the next phase's first."""
    for phase in phases:
        stages = BASELINE_STAGES if phase.index == 0 else STAGES
        due = [stage for stage in stages if stage not in phase.stages_done]
        if due:
            return f"phase {phase.index}: {due[0]}"
    upcoming = len(phases)
    if planned is None or upcoming >= planned:
        return None
    return f"phase {upcoming}: {(BASELINE_STAGES if upcoming == 0 else STAGES)[0]}"


def _planned(options: PipelineOptions | None) -> int | None:
    return options.hyperparams.curriculum.phases + 1 if options else None


def run_summaries(session: Session) -> list[RunSummary]:
    """Every run, newest first."""
    out = []
    for run in session.scalars(select(m.Run).order_by(m.Run.id.desc())).all():
        phases = list(session.scalars(select(m.Phase).where(m.Phase.run_id == run.id).order_by(m.Phase.index)))
        planned = _planned(_options(run))
        evaluated = [p.metrics["evaluate.success"] for p in phases if "evaluate.success" in p.metrics]
        out.append(RunSummary(run.name, run.created_at, planned, sum(p.status == "done" for p in phases),
                              _current_stage(phases, planned), evaluated[-1] if evaluated else None))
    return out


@dataclass(frozen=True)
class RunView:
    name: str
    options: PipelineOptions | None
    rows: list[dict[str, Any]]  # webrl.runs.report.phase_rows_in: what the report's table and plot are made from
    current: str | None
    stages: list[str]  # every stage any phase has, in pipeline order (the timing table's columns)
    seconds: dict[int, dict[str, float]]  # phase -> stage -> wall seconds


def run_view(session: Session, name: str) -> RunView | None:
    run = session.scalar(select(m.Run).where(m.Run.name == name))
    if run is None:
        return None
    phases = list(session.scalars(select(m.Phase).where(m.Phase.run_id == run.id).order_by(m.Phase.index)))
    options = _options(run)
    seconds = {p.index: {stage: float(p.metrics[f"{stage}.seconds"]) for stage in (*BASELINE_STAGES, *STAGES)
                         if f"{stage}.seconds" in p.metrics} for p in phases}
    present = {stage for by_stage in seconds.values() for stage in by_stage}
    order = [stage for stage in dict.fromkeys((*BASELINE_STAGES[1:], *STAGES)) if stage in present]
    return RunView(name, options, phase_rows_in(session, name), _current_stage(phases, _planned(options)), order,
                   seconds)


# ---------------------------------------------------------------------------------------------- a phase's tasks
@dataclass(frozen=True)
class TaskRef:
    id: int
    key: str
    intent: str


@dataclass(frozen=True)
class GeneratedTask:
    task: TaskRef
    site: str
    parent: TaskRef | None  # the failed task it was evolved from
    value: float | None  # V(start) the filter judged it by
    kept: bool
    in_band: bool | None  # None: no value to judge (phase 1 without an ORM, or the curriculum off)


@dataclass(frozen=True)
class PhaseTasks:
    run: str
    index: int
    judge: str  # who valued the tasks: "critic:<name>", "orm:<name>" or "none"
    low: float
    high: float
    tasks: list[GeneratedTask]
    metrics: dict[str, Any]

    @property
    def kept(self) -> int:
        return sum(t.kept for t in self.tasks)

    @property
    def topped_up(self) -> int:
        return sum(t.kept and t.in_band is False for t in self.tasks)


def _ref(task: m.Task | None) -> TaskRef | None:
    return TaskRef(task.id, task.key, task.intent) if task is not None else None


def phase_tasks(session: Session, run_name: str, index: int) -> PhaseTasks | None:
    """The tasks a phase generated (and, with the curriculum off, the seed tasks it kept), each with its parent,
    its value, kept or filtered out, in the band or topped up."""
    run = session.scalar(select(m.Run).where(m.Run.name == run_name))
    phase = run and session.scalar(select(m.Phase).where(m.Phase.run_id == run.id, m.Phase.index == index))
    if run is None or phase is None:
        return None
    state = PhaseState.model_validate(phase.state or {})
    kept = set(state.kept_keys)
    keys = list(dict.fromkeys([*state.candidate_keys, *state.kept_keys]))
    rows = {t.key: t for t in session.scalars(select(m.Task).options(selectinload(m.Task.parent))
                                              .where(m.Task.key.in_(keys)))}
    judge = str(phase.metrics.get("filter.judge", "none"))
    values = dict(session.execute(select(m.CriticValue.task_id, m.CriticValue.value).where(
        m.CriticValue.critic_version == judge, m.CriticValue.task_id.in_([t.id for t in rows.values()]))).all())
    options = _options(run)
    curriculum = options.hyperparams.curriculum if options else DEFAULTS.curriculum
    low, high = curriculum.value_low, curriculum.value_high
    tasks = []
    for key in keys:
        row = rows.get(key)
        if row is None:
            continue
        value = values.get(row.id)
        tasks.append(GeneratedTask(_ref(row), row.site, _ref(row.parent), value, key in kept,
                                   None if value is None else low <= value <= high))
    return PhaseTasks(run_name, index, judge, low, high, tasks, dict(phase.metrics))


# ---------------------------------------------------------------------------------------------- trajectories
class TrajectoryFilters(BaseModel):
    """The trajectory list's filters (its query string; a blank field, what a form's "any" sends, is None)."""

    model_config = ConfigDict(frozen=True)

    run: str | None = Field(None, max_length=80, description="a run's name: the trajectories it rolled out")
    phase: int | None = Field(None, ge=0, le=DB_MAX_INT)
    site: str | None = Field(None, max_length=40)
    template: int | None = Field(None, ge=-DB_MAX_INT - 1, le=DB_MAX_INT, description="intent_template_id of the task")
    outcome: Outcome | None = Field(None, description="by the evaluator's score: success, failure or unscored")
    purpose: str | None = Field(None, max_length=20)
    task: int | None = Field(None, ge=1, le=DB_MAX_INT, description="a task's id")
    page: int = Field(1, ge=1, le=MAX_PAGE)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    def query(self, **changes: Any) -> dict[str, Any]:
        """The filters (with ``changes``) as query parameters, for links to the same list."""
        return {k: v for k, v in {**self.model_dump(), **changes}.items() if v is not None and (k, v) != ("page", 1)}


@dataclass(frozen=True)
class FilterChoices:
    runs: list[str]
    phases: list[int]
    sites: list[str]
    templates: list[int]
    purposes: list[str]
    outcomes: tuple[Outcome, ...] = ("success", "failure", "unscored")


@dataclass(frozen=True)
class TrajectoryListing:
    id: int
    task: TaskRef
    site: str
    template: int | None
    phase: int
    attempt: int
    purpose: str
    n_steps: int
    stop_reason: str
    env_score: float | None
    reward: float | None
    created_at: datetime
    run: str | None  # the run that rolled it out; None for a stand-alone rollout


@dataclass(frozen=True)
class TrajectoryPage:
    rows: list[TrajectoryListing]
    total: int
    filters: TrajectoryFilters

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / PAGE_SIZE))


def _template_of(config: dict[str, Any] | None) -> int | None:
    value = (config or {}).get("intent_template_id")
    return int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else None


def filter_choices(session: Session) -> FilterChoices:
    """The values each filter can take: those of the stored trajectories."""
    joined = select(m.Task).join(m.TrajectoryRow, m.TrajectoryRow.task_id == m.Task.id)
    template = m.Task.config["intent_template_id"].as_integer()
    return FilterChoices(
        runs=list(session.scalars(select(m.Run.name).join(m.TrajectoryRow, m.TrajectoryRow.run_id == m.Run.id)
                                  .distinct().order_by(m.Run.name))),
        phases=list(session.scalars(select(m.TrajectoryRow.phase).distinct().order_by(m.TrajectoryRow.phase))),
        sites=list(session.scalars(joined.with_only_columns(m.Task.site).distinct().order_by(m.Task.site))),
        templates=[t for t in session.scalars(joined.with_only_columns(template).distinct().order_by(template))
                   if t is not None],
        purposes=list(session.scalars(select(m.TrajectoryRow.purpose).distinct().order_by(m.TrajectoryRow.purpose))),
    )


def trajectory_page(session: Session, filters: TrajectoryFilters) -> TrajectoryPage:
    """One page of the trajectories that match ``filters``, newest first."""
    query = select(m.TrajectoryRow).join(m.Task, m.TrajectoryRow.task_id == m.Task.id)
    if filters.run is not None:  # run_id 0 (no run) matches no row of runs
        query = query.join(m.Run, m.TrajectoryRow.run_id == m.Run.id).where(m.Run.name == filters.run)
    if filters.phase is not None:
        query = query.where(m.TrajectoryRow.phase == filters.phase)
    if filters.site is not None:
        query = query.where(m.Task.site == filters.site)
    if filters.template is not None:
        query = query.where(m.Task.config["intent_template_id"].as_integer() == filters.template)
    if filters.purpose is not None:
        query = query.where(m.TrajectoryRow.purpose == filters.purpose)
    if filters.task is not None:
        query = query.where(m.TrajectoryRow.task_id == filters.task)
    if filters.outcome == "success":
        query = query.where(m.TrajectoryRow.env_score >= SUCCESS_SCORE)
    elif filters.outcome == "failure":
        query = query.where(m.TrajectoryRow.env_score < SUCCESS_SCORE)
    elif filters.outcome == "unscored":
        query = query.where(m.TrajectoryRow.env_score.is_(None))
    total = session.scalar(query.with_only_columns(func.count(m.TrajectoryRow.id))) or 0
    found = session.scalars(query.options(selectinload(m.TrajectoryRow.task), selectinload(m.TrajectoryRow.labels))
                            .order_by(m.TrajectoryRow.id.desc())
                            .offset((filters.page - 1) * PAGE_SIZE).limit(PAGE_SIZE)).all()
    runs = _run_names(session, {t.run_id for t in found})
    rows = []
    for t in found:
        label = label_of(t)
        rows.append(TrajectoryListing(t.id, _ref(t.task), t.task.site, _template_of(t.task.config), t.phase,
                                      t.attempt, t.purpose, t.n_steps, t.stop_reason, t.env_score,
                                      label.reward if label else None, t.created_at, runs.get(t.run_id)))
    return TrajectoryPage(rows, total, filters)


def _run_names(session: Session, run_ids: set[int]) -> dict[int, str]:
    """runs.id -> name for ``run_ids`` (a stand-alone rollout's 0 names none)."""
    return dict(session.execute(select(m.Run.id, m.Run.name).where(m.Run.id.in_(run_ids))).tuples().all())


# ---------------------------------------------------------------------------------------------- one trajectory
@dataclass(frozen=True)
class TokenCell:
    text: str  # the token as decoded, or "#<id>" when the actor's tokenizer is not at hand
    logprob: float
    bucket: int  # 0 (p < 0.1) .. LOGPROB_BUCKETS - 1 (p >= 0.9)


@dataclass(frozen=True)
class TrainedValues:
    """What one phase's training made of a step (``step_values``)."""

    phase: int
    critic_version: str
    v_s: float
    v_next: float
    advantage: float
    advantage_binarised: float
    used: bool  # trained on by the actor's update (the loss's mask less the refused positives)


@dataclass(frozen=True)
class StepView:
    id: int
    index: int
    url: str
    html: str  # the observation as the actor saw it (untrusted page content: the templates escape it)
    observation_error: str | None
    element: str | None  # the id of the element the action acted on
    response: str
    action: str | None
    parse_error: str | None
    error: str | None
    has_screenshot: bool
    tokens: list[TokenCell]
    mc_return: float | None  # G_t of the trajectory's reward (webrl.method.returns.mc_returns)
    value: float | None  # V(start state), step 0, where the curriculum filter stored it
    trained: list[TrainedValues]  # per phase that trained on the step: V(s), V(s'), A, the loss's mask

    @property
    def mean_logprob(self) -> float | None:
        return sum(t.logprob for t in self.tokens) / len(self.tokens) if self.tokens else None


@dataclass(frozen=True)
class LabelView:
    orm_version: str
    p_yes: float
    reward: float
    threshold: float


@dataclass(frozen=True)
class TrajectoryView:
    id: int
    task: TaskRef
    site: str
    template: int | None
    parent: TaskRef | None
    phase: int
    attempt: int
    purpose: str
    actor_version: str
    answer: str | None
    stop_reason: str
    env_score: float | None
    label: LabelView | None
    value_version: str | None  # the critic (or filter judge) whose V(start) step 0 shows
    steps: list[StepView] = field(default_factory=list)


def _acted_element(action: str | None) -> str | None:
    if not action:
        return None
    try:
        return parse_action(action).element
    except ActionParseError:
        return None


def token_cells(token_ids: list[int], logprobs: list[float], decode: Any | None) -> list[TokenCell]:
    """The response's tokens with their log-probs; ``decode`` (token id -> text) when a tokenizer is at hand."""
    cells = []
    for token_id, logprob in zip(token_ids, logprobs, strict=False):
        p = math.exp(min(float(logprob), 0.0))
        text = decode(int(token_id)) if decode else f"#{token_id}"
        cells.append(TokenCell(text, float(logprob), min(int(p * LOGPROB_BUCKETS), LOGPROB_BUCKETS - 1)))
    return cells


def start_value(session: Session, task_id: int) -> tuple[float, str] | None:
    """The newest stored V(start state) of a task and the critic (or filter judge) that gave it."""
    row = session.scalar(select(m.CriticValue).where(m.CriticValue.task_id == task_id)
                         .order_by(m.CriticValue.id.desc()).limit(1))
    return (row.value, row.critic_version) if row else None


def trajectory_view(session: Session, trajectory_id: int, decoder: Any | None = None,
                    gamma: float = DEFAULTS.advantage.gamma) -> TrajectoryView | None:
    """A trajectory with every step; ``decoder(actor_version)`` gives a token-id -> text function (or None)."""
    from webrl.method.returns import mc_returns

    t = session.get(m.TrajectoryRow, trajectory_id, options=[selectinload(m.TrajectoryRow.steps),
                                                          selectinload(m.TrajectoryRow.labels)])
    if t is None:
        return None
    label = label_of(t)
    returns = mc_returns([label.reward] * len(t.steps), gamma).tolist() if label and t.steps else []
    start = start_value(session, t.task_id)
    trained = trained_values(session, [s.id for s in t.steps])
    decode = decoder(t.actor_version) if decoder else None
    steps = [StepView(
        id=s.id, index=s.index, url=s.url, html=str((s.observation or {}).get("html", "")),
        observation_error=(s.observation or {}).get("error"), element=_acted_element(s.action), response=s.response,
        action=s.action, parse_error=s.parse_error, error=s.error, has_screenshot=s.screenshot is not None,
        tokens=token_cells(list(s.token_ids or []), list(s.logprobs or []), decode),
        mc_return=returns[i] if returns else None, value=start[0] if start and s.index == 0 else None,
        trained=trained.get(s.id, []),
    ) for i, s in enumerate(t.steps)]
    return TrajectoryView(
        id=t.id, task=_ref(t.task), site=t.task.site, template=_template_of(t.task.config), parent=_ref(t.task.parent),
        phase=t.phase, attempt=t.attempt, purpose=t.purpose, actor_version=t.actor_version, answer=t.answer,
        stop_reason=t.stop_reason, env_score=t.env_score,
        label=LabelView(label.orm_version, label.p_yes, label.reward, label.threshold) if label else None,
        value_version=start[1] if start else None, steps=steps)


def trained_values(session: Session, step_ids: list[int]) -> dict[int, list[TrainedValues]]:
    """Step id -> what each phase's training made of it, in phase order."""
    out: dict[int, list[TrainedValues]] = {}
    rows = session.scalars(select(m.StepValue).where(m.StepValue.step_id.in_(step_ids))
                           .order_by(m.StepValue.phase, m.StepValue.id))
    for v in rows:
        out.setdefault(v.step_id, []).append(TrainedValues(v.phase, v.critic_version, v.v_s, v.v_next, v.advantage,
                                                           v.advantage_binarised, v.used))
    return out


def screenshot_path(session: Session, step_id: int) -> str | None:
    return session.scalar(select(m.StepRow.screenshot).where(m.StepRow.id == step_id))


# ---------------------------------------------------------------------------------------------- a task's attempts
@dataclass(frozen=True)
class TaskAttempts:
    task: TaskRef
    site: str
    template: int | None
    origin: str
    lineage: list[TaskRef]  # the task's ancestors, the seed first
    children: list[TaskRef]  # tasks evolved from it
    attempts: list[TrajectoryView]  # phase order

    @property
    def rows(self) -> list[list[StepView | None]]:
        """Step i of every attempt side by side (None where an attempt had fewer steps)."""
        depth = max((len(a.steps) for a in self.attempts), default=0)
        return [[a.steps[i] if i < len(a.steps) else None for a in self.attempts] for i in range(depth)]


def task_attempts(session: Session, task_id: int, decoder: Any | None = None) -> TaskAttempts | None:
    task = session.get(m.Task, task_id)
    if task is None:
        return None
    lineage, seen, parent = [], {task.id}, task.parent
    while parent is not None and parent.id not in seen:
        lineage.insert(0, _ref(parent))
        seen.add(parent.id)
        parent = parent.parent
    children = [_ref(c) for c in session.scalars(select(m.Task).where(m.Task.parent_id == task.id).order_by(m.Task.id))]
    ids = session.scalars(select(m.TrajectoryRow.id).where(m.TrajectoryRow.task_id == task.id)
                          .order_by(m.TrajectoryRow.phase, m.TrajectoryRow.attempt, m.TrajectoryRow.id)).all()
    attempts = [view for view in (trajectory_view(session, i, decoder) for i in ids) if view is not None]
    return TaskAttempts(_ref(task), task.site, _template_of(task.config), task.origin, lineage, children, attempts)
