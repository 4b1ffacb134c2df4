"""SQLAlchemy 2 models: tasks, trajectories and steps, ORM labels, critic values, pipeline state,
checkpoints. Portable between SQLite (embedded) and PostgreSQL (distributed)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Task(Base):
    """A task: a WebArena config plus where it came from in the curriculum."""

    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(200), unique=True, index=True)  # stable external id
    intent: Mapped[str] = mapped_column(Text)
    intent_norm: Mapped[str] = mapped_column(Text, index=True)  # for de-duplication
    site: Mapped[str] = mapped_column(String(40), index=True)
    origin: Mapped[str] = mapped_column(String(20), index=True)  # seed | generated | test
    split: Mapped[str] = mapped_column(String(20), index=True)  # train | test
    phase: Mapped[int] = mapped_column(Integer, default=0, index=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id"), nullable=True)
    generator: Mapped[str | None] = mapped_column(String(40), nullable=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    parent: Mapped[Task | None] = relationship(remote_side=[id])


class GenerationRequest(Base):
    """A ``taskgen.generate`` request that stored its tasks, by the digest of what decides them: a retried or resumed
    request (a worker killed after the commit, a pipeline killed before its stage finished) returns these keys
    instead of generating anew past them. Written in the transaction that stores the tasks."""

    __tablename__ = "generation_requests"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_keys: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


#: ``trajectories.run_id`` of a trajectory no pipeline run made (``webrl eval``, bootstrap, ``webrl train-orm``).
NO_RUN = 0


class TrajectoryRow(Base):
    """One episode of the actor on a task. Unique per (task, phase, attempt, run): rollouts are idempotent within
    a run, and two ``webrl train`` runs in one database never share (or skip each other's) trajectories."""

    __tablename__ = "trajectories"
    __table_args__ = (UniqueConstraint("task_id", "phase", "attempt", "run_id", name="uq_trajectory_attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    phase: Mapped[int] = mapped_column(Integer, index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    #: The pipeline run (``runs.id``) that rolled it out; :data:`NO_RUN` (0) for stand-alone rollouts. A plain
    #: integer, not a foreign key: 0 names no row of ``runs``, and a nullable FK would let NULLs through the unique
    #: constraint (NULL != NULL), which would end the stand-alone rollouts' idempotency.
    run_id: Mapped[int] = mapped_column(Integer, default=NO_RUN, server_default=str(NO_RUN), index=True)
    purpose: Mapped[str] = mapped_column(String(20), default="train")  # train | eval | orm-data
    actor_version: Mapped[str] = mapped_column(String(80), default="")
    answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    stop_reason: Mapped[str] = mapped_column(String(80), default="")
    env_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    n_steps: Mapped[int] = mapped_column(Integer, default=0)
    last_observation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    task: Mapped[Task] = relationship()
    steps: Mapped[list[StepRow]] = relationship(
        back_populates="trajectory", order_by="StepRow.index", cascade="all, delete-orphan"
    )
    labels: Mapped[list[OrmLabel]] = relationship(back_populates="trajectory", cascade="all, delete-orphan")


class StepRow(Base):
    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("trajectory_id", "index", name="uq_step_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    observation: Mapped[dict[str, Any]] = mapped_column(JSON)
    response: Mapped[str] = mapped_column(Text)
    action: Mapped[str | None] = mapped_column(Text, nullable=True)  # canonical action text
    parse_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    token_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    logprobs: Mapped[list[Any]] = mapped_column(JSON, default=list)
    url: Mapped[str] = mapped_column(Text, default="")
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: The page the step saw as an image, a path relative to the artifacts directory (``webrl.store.screenshots``);
    #: None when the rollout took no screenshots.
    screenshot: Mapped[str | None] = mapped_column(Text, nullable=True)

    trajectory: Mapped[TrajectoryRow] = relationship(back_populates="steps")


class StepValue(Base):
    """What a phase's training made of a step (docs/design.md step 6): the critic's V(s) and V(s'), the advantage before
    and after binarising, and whether the actor loss used the step (its mask, A > 0). One per (step, critic)."""

    __tablename__ = "step_values"
    __table_args__ = (UniqueConstraint("step_id", "critic_version", name="uq_step_value_critic"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step_id: Mapped[int] = mapped_column(ForeignKey("steps.id", ondelete="CASCADE"), index=True)
    critic_version: Mapped[str] = mapped_column(String(80))
    phase: Mapped[int] = mapped_column(Integer)  # the phase whose training computed it
    v_s: Mapped[float] = mapped_column(Float)
    v_next: Mapped[float] = mapped_column(Float)
    advantage: Mapped[float] = mapped_column(Float)  # clamp(V(s') - V(s) - penalty + r + G_t, -clip, clip)
    advantage_binarised: Mapped[float] = mapped_column(Float)
    used: Mapped[bool] = mapped_column(Boolean)  # in the actor loss's mask
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class OrmLabel(Base):
    """The ORM's judgement of a trajectory. One per (trajectory, ORM version): scoring is idempotent."""

    __tablename__ = "orm_labels"
    __table_args__ = (UniqueConstraint("trajectory_id", "orm_version", name="uq_label_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"), index=True)
    orm_version: Mapped[str] = mapped_column(String(80))
    p_yes: Mapped[float] = mapped_column(Float)
    reward: Mapped[float] = mapped_column(Float)
    threshold: Mapped[float] = mapped_column(Float)  # the one the reward was made with (``rewards.reward_of``)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    trajectory: Mapped[TrajectoryRow] = relationship(back_populates="labels")


class CriticValue(Base):
    """V(start state) of a task under a critic version (used to filter the curriculum)."""

    __tablename__ = "critic_values"
    __table_args__ = (UniqueConstraint("task_id", "critic_version", name="uq_value_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    critic_version: Mapped[str] = mapped_column(String(80))
    value: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Run(Base):
    """A `webrl train` run: its name and the options it was started with."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Phase(Base):
    """Pipeline state of one phase: the stages finished so far, what they hand the next ones (``state``, a
    :class:`webrl.orchestration.pipeline_state.PhaseState`) and what they measured (``metrics``, for reporting only)."""

    __tablename__ = "phases"
    __table_args__ = (UniqueConstraint("run_id", "index", name="uq_phase_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default="running")  # running | done | failed
    stages_done: Mapped[list[Any]] = mapped_column(JSON, default=list)
    state: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Checkpoint(Base):
    """A published model folder."""

    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("role", "version", name="uq_checkpoint_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    role: Mapped[str] = mapped_column(String(20), index=True)  # actor | critic | orm
    version: Mapped[str] = mapped_column(String(80))
    parent_version: Mapped[str | None] = mapped_column(String(80), nullable=True)
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    phase: Mapped[int | None] = mapped_column(Integer, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
