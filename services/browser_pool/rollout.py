"""Rollout jobs: run a policy on stored tasks and store the trajectories (what ``rollout.run`` does).

Idempotent per (task, phase, attempt, run): tasks that already have a trajectory for this phase, attempt and run
are not run again; their stored ids are returned with the new ones. Another run's trajectory never counts.
Each trajectory is stored as its episode ends, so a job that fails part-way (a worker killed, an actor service gone)
keeps the episodes it finished, and its retry runs only the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from services.browser_pool.pool import BrowserPool
from services.browser_pool.runs import run_batch
from webrl.agent.schemas import TaskConfig, Trajectory
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository
from webrl.db.session import session_scope
from webrl.policies.specs import close_policy, policy_from_spec
from webrl.store import screenshots
from webrl.wire.contracts import InvalidRequest, RolloutRequest, RolloutResult

log = logging.getLogger(__name__)

T = TypeVar("T")


class UnknownTasksError(InvalidRequest):
    """Task keys that are not in the database."""

    def __init__(self, message: str) -> None:
        super().__init__("task_keys", message)


def _known_tasks(session: Session, keys: list[str]) -> list[m.Task]:
    """The task rows of ``keys``; :class:`UnknownTasksError` (a 422 naming ``task_keys``) when any is missing."""
    rows = repository.tasks_by_keys(session, keys)
    missing = sorted(set(keys) - {r.key for r in rows})
    if missing:
        raise UnknownTasksError(f"unknown task keys (not in the database; run `webrl tasks load`?): "
                                f"{', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}")
    return rows


def check_task_keys(payload: RolloutRequest, settings: Settings) -> None:
    """Refuse a request naming tasks the database does not hold before its job is queued (the job checks again)."""
    with session_scope(settings) as session:
        _known_tasks(session, payload.task_keys)


def _plan(payload: RolloutRequest, settings: Settings) -> tuple[list[tuple[int, TaskConfig]], dict[int, int]]:
    """Tasks still to run as (db id, config), and db task id -> stored trajectory id for those already run."""
    with session_scope(settings) as session:
        rows = _known_tasks(session, payload.task_keys)
        todo, done = [], {}
        for row in rows:
            stored = repository.find_trajectory(session, row.id, payload.phase, payload.attempt,
                                                run_id=payload.run_id)
            if stored is not None:
                done[row.id] = stored.id
            else:
                todo.append((row.id, repository.task_config(row)))
    return todo, done


def _store(payload: RolloutRequest, settings: Settings, task_id: int, traj: Trajectory) -> int:
    """One trajectory with its steps (and their screenshots, when taken, beside it in the artifacts): its id."""
    with session_scope(settings) as session:
        row = repository.save_trajectory(session, task_id, payload.phase, payload.attempt, traj,
                                         purpose=payload.purpose, run_id=payload.run_id)
        if payload.screenshots:
            screenshots.record(settings, row, traj.steps)
        return row.id


def _scores(settings: Settings, trajectory_ids: list[int]) -> list[float]:
    from webrl.db import models as m

    with session_scope(settings) as session:
        rows = [session.get(m.TrajectoryRow, i) for i in trajectory_ids]
        return [r.env_score for r in rows if r is not None and r.env_score is not None]


async def run_rollout(payload: RolloutRequest, settings: Settings, pool: BrowserPool | None = None) -> RolloutResult:
    """Run the payload's policy on its tasks (skipping those already stored) and store every trajectory."""
    todo, done = _plan(payload, settings)
    new: dict[int, int] = {}
    if todo:
        own = pool is None
        pool = pool or BrowserPool(settings, size=min(payload.concurrency, len(todo)))
        policy = policy_from_spec(payload.policy, settings)  # holds its backend until the finally below

        async def store(index: int, traj: Trajectory) -> None:  # as each episode ends: a failed job keeps them
            task_id = todo[index][0]
            new[task_id] = await asyncio.to_thread(_store, payload, settings, task_id, traj)

        try:
            await run_batch([c for _, c in todo], policy, pool, settings, payload.concurrency,
                            max_steps=payload.max_steps, stop_rules=payload.stop_rules(),
                            screenshots=payload.screenshots, on_trajectory=store)
        finally:
            close_policy(policy)
            if own:
                await pool.close()
    by_task = {**done, **new}
    with session_scope(settings) as session:
        order = [r.id for r in repository.tasks_by_keys(session, payload.task_keys)]
    ids = [by_task[i] for i in order]
    scores = _scores(settings, ids)
    log.info("rollout: %d trajectories (%d new), mean env score %.3f", len(ids), len(new),
             sum(scores) / len(scores) if scores else 0.0)
    return RolloutResult(trajectory_ids=ids, mean_env_score=sum(scores) / len(scores) if scores else 0.0,
                         n_scored=len(scores), n_new=len(new))


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even when this thread already runs an event loop
    (an eager Celery task called from async code): then it runs on a fresh loop in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as executor:
        return executor.submit(asyncio.run, coro).result()
