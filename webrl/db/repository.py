"""Queries and writes every part shares. Each function takes an open Session; the caller owns the
transaction (``session_scope``), so a failure loses nothing already stored."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, selectinload

from webrl.agent.schemas import Observation, TaskConfig, Trajectory
from webrl.db import models as m
from webrl.method.rewards import reward_of
from webrl.text import without_nul

_NON_WORD = re.compile(r"[^a-z0-9]+")
T = TypeVar("T")
K = TypeVar("K")


def insert_once(session: Session, row: T, stored: Callable[[], T | None]) -> T:
    """Insert ``row`` (one whose unique key the caller found free), or, when a concurrent writer committed the same
    key in between (two deliveries of one job, a resumed pipeline beside its killed one's job, two commands on one
    laptop database), the row that writer stored (``stored()``). PostgreSQL: the insert runs in a savepoint that its
    ``IntegrityError`` rolls back, so the caller's transaction goes on. SQLite (whose savepoints pysqlite does not
    keep): the transaction takes the database's write lock first and looks again (:func:`_hold_sqlite_write_lock`)."""
    if session.get_bind().dialect.name == "sqlite":
        _hold_sqlite_write_lock(session)
        with session.no_autoflush:
            winner = stored()
        if winner is not None:
            return winner
        session.add(row)
        session.flush()
        return row
    try:
        with session.begin_nested():
            session.add(row)
            session.flush()
        return row
    except IntegrityError:
        winner = stored()
        if winner is None:
            raise
        return winner


def insert_each_once(session: Session, keys: Sequence[K], make: Callable[[K], T],
                     stored: Callable[[K], T | None]) -> list[tuple[T, bool]]:
    """:func:`insert_once` for many rows: ``make(key)`` for each of ``keys`` (unique keys the caller found free), all
    in one savepoint; when a concurrent writer committed some of those keys in between, that savepoint is rolled
    back and each row goes in its own (:func:`insert_once`), the writer's row (``stored(key)``) standing for each key
    it stored. Returns ``(row, inserted)`` per key, in order; ``inserted`` False: the other writer's row. SQLite:
    under the write lock, each key is looked up again."""
    if not keys:
        return []
    if session.get_bind().dialect.name == "sqlite":
        _hold_sqlite_write_lock(session)
        with session.no_autoflush:
            winners = [stored(key) for key in keys]
        fresh = _add_all(session, [key for key, winner in zip(keys, winners, strict=True) if winner is None], make)
        made = iter(fresh)
        return [(next(made), True) if winner is None else (winner, False) for winner in winners]
    try:
        with session.begin_nested():
            rows = _add_all(session, keys, make)
        return [(row, True) for row in rows]
    except IntegrityError:
        return [_insert_key_once(session, key, make, stored) for key in keys]


def _hold_sqlite_write_lock(session: Session) -> None:
    """Make the session's SQLite transaction hold the database's write lock until it ends, so no other connection
    commits between a look and an insert. pysqlite begins a transaction only at a write, and a transaction that has
    written holds the lock already; one that has not begins here with ``BEGIN IMMEDIATE`` (waiting on another
    writer at most the connection's busy timeout). Its pending rows are written first: they belong to it."""
    session.flush()
    dbapi = session.connection().connection.dbapi_connection
    if dbapi is not None and not dbapi.in_transaction:
        session.execute(text("BEGIN IMMEDIATE"))


def _add_all(session: Session, keys: Sequence[K], make: Callable[[K], T]) -> list[T]:
    rows = [make(key) for key in keys]
    session.add_all(rows)
    session.flush()
    return rows


def _insert_key_once(session: Session, key: K, make: Callable[[K], T],
                     stored: Callable[[K], T | None]) -> tuple[T, bool]:
    row = make(key)
    kept = insert_once(session, row, lambda: stored(key))
    return kept, kept is row


def normalise_intent(intent: str) -> str:
    """Lower-case words joined by single spaces: the key for exact de-duplication."""
    return " ".join(_NON_WORD.sub(" ", intent.lower()).split())


def upsert_task(
    session: Session,
    key: str,
    config: TaskConfig,
    *,
    origin: str,
    split: str,
    phase: int = 0,
    parent_id: int | None = None,
    generator: str | None = None,
) -> m.Task:
    """Insert a task, or return the stored one with the same key unchanged (idempotent)."""
    row = session.scalar(select(m.Task).where(m.Task.key == key))
    if row is not None:
        return row
    row = m.Task(
        key=key,
        intent=config.intent,
        intent_norm=normalise_intent(config.intent),
        site=config.site,
        origin=origin,
        split=split,
        phase=phase,
        parent_id=parent_id,
        generator=generator,
        config=config.to_json(),
    )
    return insert_once(session, row, lambda: session.scalar(select(m.Task).where(m.Task.key == key)))


def upsert_tasks(session: Session, configs: Sequence[TaskConfig], prefix: str, *, origin: str,
                 split: str) -> list[str]:
    """:func:`upsert_task` for each config under the key ``<prefix>/<task_id>``; returns the keys in order."""
    keys = [f"{prefix}/{config.task_id}" for config in configs]
    for key, config in zip(keys, configs, strict=True):
        upsert_task(session, key, config, origin=origin, split=split)
    return keys


def task_config(row: m.Task) -> TaskConfig:
    return TaskConfig.from_json(row.config)


def tasks_by_keys(session: Session, keys: Sequence[str]) -> list[m.Task]:
    rows = session.scalars(select(m.Task).where(m.Task.key.in_(list(keys)))).all()
    by_key = {r.key: r for r in rows}
    return [by_key[k] for k in keys if k in by_key]


def tasks_where(session: Session, *, split: str | None = None, origin: str | None = None,
                phase: int | None = None, site: str | None = None) -> list[m.Task]:
    query = select(m.Task).order_by(m.Task.id)
    if split is not None:
        query = query.where(m.Task.split == split)
    if origin is not None:
        query = query.where(m.Task.origin == origin)
    if phase is not None:
        query = query.where(m.Task.phase == phase)
    if site is not None:
        query = query.where(m.Task.site == site)
    return list(session.scalars(query).all())


def find_trajectory(session: Session, task_id: int, phase: int, attempt: int, *,
                    run_id: int = m.NO_RUN) -> m.TrajectoryRow | None:
    """The stored trajectory of this (task, phase, attempt) made by run ``run_id`` (``NO_RUN``, 0: by none),
    so one run never takes another's rollout for its own."""
    return session.scalar(
        select(m.TrajectoryRow).where(
            m.TrajectoryRow.task_id == task_id, m.TrajectoryRow.phase == phase, m.TrajectoryRow.attempt == attempt,
            m.TrajectoryRow.run_id == run_id,
        )
    )


def storable(text: str | None) -> str | None:
    """``text`` as every backend stores it: Postgres text cannot hold NUL, model output can (:mod:`webrl.text`)."""
    return without_nul(text)


def save_trajectory(
    session: Session, task_id: int, phase: int, attempt: int, traj: Trajectory, *, purpose: str = "train",
    run_id: int = m.NO_RUN,
) -> m.TrajectoryRow:
    """Store a trajectory with all its steps. Idempotent: a second save of the same
    (task, phase, attempt, run) returns the stored row and writes nothing."""
    existing = find_trajectory(session, task_id, phase, attempt, run_id=run_id)
    if existing is not None:
        return existing
    row = m.TrajectoryRow(
        task_id=task_id,
        phase=phase,
        attempt=attempt,
        run_id=run_id,
        purpose=purpose,
        actor_version=traj.actor_version,
        answer=storable(traj.answer),
        stop_reason=storable(traj.stop_reason),
        env_score=traj.env_score,
        n_steps=len(traj.steps),
        last_observation=traj.last_observation.model_dump() if traj.last_observation else None,
    )
    row.steps = [
        m.StepRow(
            index=s.index,
            observation=s.observation.model_dump(),
            response=storable(s.response),
            action=storable(s.action.format()) if s.action else None,
            parse_error=storable(s.parse_error),
            token_ids=list(s.token_ids),
            logprobs=list(s.logprobs),
            url=s.url,
            error=storable(s.error),
        )
        for s in traj.steps
    ]
    return insert_once(session, row, lambda: find_trajectory(session, task_id, phase, attempt, run_id=run_id))


def load_trajectory(row: m.TrajectoryRow) -> Trajectory:
    """The typed record of a stored trajectory (steps included, latest ORM label applied)."""
    from webrl.agent.actions import ActionParseError, parse_action
    from webrl.agent.schemas import Step

    steps = []
    for s in row.steps:
        action = None
        if s.action:
            try:
                action = parse_action(s.action)
            except ActionParseError:
                action = None
        steps.append(
            Step(index=s.index, observation=Observation.model_validate(s.observation), response=s.response,
                 action=action, parse_error=s.parse_error, token_ids=list(s.token_ids),
                 logprobs=list(s.logprobs), url=s.url, error=s.error)
        )
    label = label_of(row)
    return Trajectory(
        task_id=row.task.key,
        intent=row.task.intent,
        actor_version=row.actor_version,
        steps=steps,
        answer=row.answer,
        stop_reason=row.stop_reason,
        env_score=row.env_score,
        orm_p=label.p_yes if label else None,
        reward=label.reward if label else None,
        last_observation=Observation.model_validate(row.last_observation) if row.last_observation else None,
    )


def label_of(row: m.TrajectoryRow, orm_version: str | None = None) -> m.OrmLabel | None:
    """A trajectory's ORM label: the one the ORM ``orm_version`` gave (a run's ORM; another ORM's label never stands
    in), or, with ``orm_version`` None, the latest label any ORM gave; None when there is none. ``row.labels`` must
    be loaded. A label is unique per (trajectory, ORM version) (:func:`save_label`)."""
    if orm_version is not None:
        return next((label for label in row.labels if label.orm_version == orm_version), None)
    return max(row.labels, key=lambda label: label.id) if row.labels else None


def trajectories_for_phase(session: Session, phase: int, purpose: str = "train", *,
                           run_id: int) -> list[m.TrajectoryRow]:
    """A phase's trajectories of one run, oldest first, their tasks and labels loaded (every reader looks at both).
    ``run_id`` has no default: every run numbers its phases alike, so a reader that forgot the run would silently
    read the other runs' rollouts too."""
    return list(
        session.scalars(
            select(m.TrajectoryRow)
            .options(selectinload(m.TrajectoryRow.task), selectinload(m.TrajectoryRow.labels))
            .where(m.TrajectoryRow.phase == phase, m.TrajectoryRow.purpose == purpose, m.TrajectoryRow.run_id == run_id)
            .order_by(m.TrajectoryRow.id)
        ).all()
    )


def save_label(session: Session, trajectory_id: int, orm_version: str, p_yes: float, threshold: float) -> m.OrmLabel:
    """Store an ORM judgement; idempotent per (trajectory, ORM version)."""
    row = session.scalar(
        select(m.OrmLabel).where(m.OrmLabel.trajectory_id == trajectory_id, m.OrmLabel.orm_version == orm_version)
    )
    if row is not None:
        return row
    row = m.OrmLabel(trajectory_id=trajectory_id, orm_version=orm_version, p_yes=p_yes,
                     reward=reward_of(p_yes, threshold), threshold=threshold)
    return insert_once(session, row, lambda: session.scalar(select(m.OrmLabel).where(
        m.OrmLabel.trajectory_id == trajectory_id, m.OrmLabel.orm_version == orm_version)))


def stored_critic_values(session: Session, critic_version: str,
                         task_ids: Iterable[int]) -> dict[int, m.CriticValue]:
    """The values stored under ``critic_version`` for ``task_ids``, by task id."""
    rows = session.scalars(select(m.CriticValue).where(m.CriticValue.critic_version == critic_version,
                                                       m.CriticValue.task_id.in_(list(task_ids))))
    return {row.task_id: row for row in rows}


def save_critic_values(session: Session, critic_version: str, values: Iterable[tuple[int, float]]) -> None:
    """Store V(start) per task; idempotent per (task, critic version): a stored value (the first given for a task)
    is kept, also one a concurrent writer (another delivery of the job) committed meanwhile."""
    wanted: dict[int, float] = {}
    for task_id, value in values:
        wanted.setdefault(task_id, value)
    stored = stored_critic_values(session, critic_version, wanted)
    missing = [task_id for task_id in wanted if task_id not in stored]
    insert_each_once(session, missing,
                     lambda task_id: m.CriticValue(task_id=task_id, critic_version=critic_version,
                                                   value=wanted[task_id]),
                     lambda task_id: stored_critic_values(session, critic_version, [task_id]).get(task_id))


@dataclass(frozen=True)
class StepValues:
    """What training computed for one step of a stored trajectory (``step_values``)."""

    trajectory_id: int
    index: int
    v_s: float
    v_next: float
    advantage: float
    advantage_binarised: float
    used: bool


def stored_step_values(session: Session, critic_version: str, step_ids: Iterable[int]) -> dict[int, m.StepValue]:
    """The step values stored under ``critic_version`` for ``step_ids``, by step id."""
    rows = session.scalars(select(m.StepValue).where(m.StepValue.critic_version == critic_version,
                                                     m.StepValue.step_id.in_(list(step_ids))))
    return {row.step_id: row for row in rows}


def save_step_values(session: Session, critic_version: str, phase: int, values: Iterable[StepValues]) -> int:
    """Store each step's values under ``critic_version``, one row per (step, critic): a retried phase that trained
    its critic again (not bit-identical on a GPU) overwrites them, so the stored values are the ones its actor
    trained with; so does one whose rows a concurrent writer (another delivery of the job) committed meanwhile.
    Returns how many rows were new."""
    values = list(values)
    rows = session.execute(select(m.StepRow.trajectory_id, m.StepRow.index, m.StepRow.id)
                           .where(m.StepRow.trajectory_id.in_({v.trajectory_id for v in values}))).all()
    step_ids = {(trajectory_id, index): step_id for trajectory_id, index, step_id in rows}
    fields: dict[int, dict[str, float | int | bool]] = {}
    for v in values:  # a step given twice: the last values stand
        step_id = step_ids.get((v.trajectory_id, v.index))
        if step_id is not None:
            fields[step_id] = {"phase": phase, "v_s": v.v_s, "v_next": v.v_next, "advantage": v.advantage,
                               "advantage_binarised": v.advantage_binarised, "used": v.used}
    stored = stored_step_values(session, critic_version, fields)
    for step_id, row in stored.items():
        _overwrite(row, fields[step_id])
    missing = [step_id for step_id in fields if step_id not in stored]
    saved = insert_each_once(session, missing,
                             lambda step_id: m.StepValue(step_id=step_id, critic_version=critic_version,
                                                         **fields[step_id]),
                             lambda step_id: stored_step_values(session, critic_version, [step_id]).get(step_id))
    for row, inserted in saved:
        if not inserted:
            _overwrite(row, fields[row.step_id])
    session.flush()
    return sum(inserted for _, inserted in saved)


def _overwrite(row: m.StepValue, fields: dict[str, float | int | bool]) -> None:
    for name, value in fields.items():
        setattr(row, name, value)
