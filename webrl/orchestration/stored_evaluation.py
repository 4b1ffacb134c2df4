"""The start actor's evaluation, read back when nothing it depends on has changed (:mod:`webrl.store.evaluations`).

Every run evaluates its start actor on the test tasks first (phase 0), and with the shipped SFT actor that is the
same greedy evaluation each time: on 2 cores a quarter of an hour or more. The pipeline looks it up by its content
key (:func:`storable_key`, :func:`stored_scores`) and runs it only when no stored one matches; a run that does run it
stores it for the next (:func:`store_if_complete`). A later phase whose actor kept the start actor's weights (a phase
with too few steps with A > 0 to update it) reads the same evaluation back for its tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select

from webrl.agent.environment import INFRASTRUCTURE_STOPS
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.session import session_scope
from webrl.method.hyperparams import Rollout
from webrl.orchestration.evaluate import TaskScore, trajectory_scores
from webrl.store.evaluations import EvaluationKey, TaskResult, evaluation_key, find, is_storable, save

log = logging.getLogger(__name__)


def key_for(settings: Settings, actor: str | Path, keys: list[str], rollout: Rollout,
            split: str = "test") -> EvaluationKey:
    """The content key of a greedy evaluation of ``actor`` on the ``split`` tasks ``keys`` (in that order): the test
    tasks, or the train-split tasks a phase's update is validated on (``evaluation.validation_tasks``)."""
    with session_scope(settings) as s:
        configs = {t.key: t.config or {} for t in repo.tasks_where(s, split=split)}
    missing = [k for k in keys if k not in configs]
    if missing:
        raise ValueError(f"not {split} tasks of the suite: {', '.join(missing[:5])}")
    return evaluation_key(settings, Path(actor), [(k, configs[k]) for k in keys], rollout)


def task_results(settings: Settings, trajectory_ids: list[int]) -> dict[str, TaskResult]:
    """Each evaluated task's :class:`TaskResult` from its episode among ``trajectory_ids``, read in one query."""
    with session_scope(settings) as s:
        rows = s.execute(select(m.Task.key, m.Task.site, m.TrajectoryRow.env_score, m.TrajectoryRow.n_steps)
                         .join(m.Task).where(m.TrajectoryRow.id.in_(trajectory_ids))).all()
    return {key: TaskResult(site=site, score=float(score or 0.0), steps=steps) for key, site, score, steps in rows}


def store_trajectories(settings: Settings, key: EvaluationKey, trajectory_ids: list[int],
                       folder: Path | None = None) -> Path:
    """Store the evaluation episodes ``trajectory_ids`` (one per task of the key) under ``key``; refused when one of
    them ended by the machinery (:data:`webrl.agent.environment.INFRASTRUCTURE_STOPS`): its 0 is not the actor's."""
    results = task_results(settings, trajectory_ids)
    if len(results) != key.n_tasks or len(trajectory_ids) != key.n_tasks:
        raise ValueError(f"{len(trajectory_ids)} episodes of {len(results)} tasks; the key names {key.n_tasks} tasks")
    with session_scope(settings) as s:
        broken = s.execute(select(m.Task.key, m.TrajectoryRow.stop_reason).join(m.Task).where(
            m.TrajectoryRow.id.in_(trajectory_ids), m.TrajectoryRow.stop_reason.in_(INFRASTRUCTURE_STOPS))).all()
    if broken:
        raise ValueError(f"{len(broken)} episode(s) ended by the machinery, not the actor "
                         f"({', '.join(f'{k}: {r}' for k, r in broken[:3])})")
    return save(settings, key, results, folder)


def storable_key(settings: Settings, actor: str | Path, keys: list[str], rollout: Rollout,
                 split: str = "test") -> EvaluationKey | None:
    """:func:`key_for` when ``actor`` is a model folder whose evaluation can be stored, else None: the rollouts must
    load it here, in fp32 (through an actor service, the service's backend and dtype decide the tokens: vLLM serves
    in bf16, and the key would not name it)."""
    from webrl.model_folders import is_model_folder

    if settings.rollouts_through_actor or not is_model_folder(Path(actor)):
        return None
    key = key_for(settings, actor, keys, rollout, split)
    return key if is_storable(key) else None


def stored_scores(settings: Settings, key: EvaluationKey, keys: list[str]) -> list[TaskScore] | None:
    """The per-task scores of ``keys`` (in that order) from the evaluation stored under ``key``, which may hold more
    tasks; None when none is stored or it lacks one of them."""
    stored = find(settings, key)
    if stored is None or any(k not in stored.results for k in keys):
        return None
    return [TaskScore(k, stored.results[k].site, stored.results[k].score) for k in keys]


def newest_trajectory_id(settings: Settings) -> int:
    """The highest trajectory id stored so far (0 when none): episodes stored later have higher ids."""
    with session_scope(settings) as s:
        return s.scalar(select(func.max(m.TrajectoryRow.id))) or 0


def store_if_complete(settings: Settings, key: EvaluationKey, trajectory_ids: list[int],
                      made_after: int = 0) -> Path | None:
    """Store the episodes under ``key`` when they are one per task of it and all were made after trajectory id
    ``made_after`` (by this evaluation: a resumed one reuses its episodes stored before a kill, which ran under the
    code and settings of then, maybe not those ``key`` names); a partial evaluation is never stored."""
    earlier = sum(1 for i in trajectory_ids if i <= made_after)
    if earlier:
        log.warning("evaluation not stored: %d of its episodes were stored before it started (a resumed evaluation; "
                    "the code or settings they ran under may not be the key's)", earlier)
        return None
    try:
        return store_trajectories(settings, key, trajectory_ids)
    except ValueError as partial:
        log.warning("evaluation not stored: %s", partial)
        return None


def greedy_scores(settings: Settings, actor: str | Path, keys: list[str], suite: list[str], rollout: Rollout,
                  run: Callable[[], list[int]], split: str = "test") -> tuple[list[TaskScore], str | None]:
    """The per-task scores of the greedy evaluation of ``actor`` on ``keys`` (tasks of ``suite``: the run's test
    tasks, or with ``split`` "train" its validation tasks) and, when they were read back, the stored key's digest (12
    characters): from an evaluation of all of ``suite`` stored under the actor's content key, else from the episodes
    ``run()`` evaluates (their trajectory ids), stored for the next time when ``keys`` are the whole suite and ``run()``
    made every one of them. The
    pipeline's evaluate and validate stages and the offline bench all read through here."""
    key = storable_key(settings, actor, suite, rollout, split)
    stored = stored_scores(settings, key, keys) if key is not None else None
    if key is not None and stored is not None:
        return stored, key.digest()[:12]
    newest = newest_trajectory_id(settings)
    ids = run()
    if key is not None and sorted(keys) == sorted(suite):
        store_if_complete(settings, key, ids, made_after=newest)
    return trajectory_scores(settings, ids), None
