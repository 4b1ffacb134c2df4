"""``webrl eval``: roll an actor out on a task split (or an external WebArena task file) and report the
evaluator's success rate per site."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from webrl.agent.early_stop import MAX_STEPS
from webrl.agent.schemas import load_task_file
from webrl.config import Settings
from webrl.db import repository as repo
from webrl.db.session import session_scope
from webrl.method.hyperparams import Rollout
from webrl.method.rewards import is_success
from webrl.policies.actor_service import rollout_policy
from webrl.wire.clients import rollout_run
from webrl.wire.contracts import RolloutRequest

EVAL_PHASE = 0  # stand-alone evaluations share phase 0 and run 0 (none); their attempt number (>= 1) tells them apart
CHUNK = 16  # tasks per rollout job


def evaluation_attempt(settings: Settings, actor: Path, max_steps: int | None = None) -> int:
    """A stable attempt number per evaluation's conditions: the actor's content and everything else a greedy episode
    depends on (:class:`webrl.store.evaluations.EvaluationKey` less the tasks: the horizon, the early stops, the
    serving dtype, the prompt budget, the code that prompts and judges, the sandbox seed, torch and transformers).
    Re-evaluating under the same conditions is idempotent; a change of any of them (a retrained actor, bf16 for
    fp32, an edited prompt) gets episodes of its own, so a stored evaluation is never made of another's."""
    from webrl.store.evaluations import evaluation_key

    rollout = Rollout(max_steps=max_steps if max_steps is not None else MAX_STEPS)
    digest = evaluation_key(settings, actor.resolve(), [], rollout).digest()
    return 1 + int(digest[:7], 16)  # 0 is the pipeline's own attempt


def external_task_keys(settings: Settings, tasks_file: Path) -> list[str]:
    """Store the configs of a WebArena-format file (origin "external") and return their keys:
    ``external/<file stem>-<digest of its configs>/<task_id>``, so an edited file, or another file of the same name,
    is a new set of tasks rather than the stored configs under the old keys."""
    configs = load_task_file(tasks_file)
    content = json.dumps([config.to_json() for config in configs], sort_keys=True)
    prefix = f"external/{tasks_file.stem}-{hashlib.sha256(content.encode()).hexdigest()[:8]}"
    with session_scope(settings) as s:
        return repo.upsert_tasks(s, configs, prefix, origin="external", split="external")


def evaluate_actor(settings: Settings, actor: Path, *, split: str = "test", tasks_file: Path | None = None,
                   limit: int | None = None, concurrency: int = 4, max_steps: int | None = None,
                   screenshots: bool = False,
                   on_progress: Callable[[str, int, int], None] | None = None) -> dict[str, tuple[int, float]]:
    """Success per site (and ``overall``) as ``{site: (n_tasks, success_rate)}``; ``max_steps``: the horizon
    (default WebRL's 30; the CPU presets train and evaluate at 8-10); ``screenshots``: store one per step."""
    if tasks_file is not None:
        keys = external_task_keys(settings, tasks_file)
    else:
        with session_scope(settings) as s:
            keys = [t.key for t in repo.tasks_where(s, split=split)]
        if not keys:
            raise ValueError(f"no tasks in split {split!r}")
    keys = keys[:limit] if limit else keys
    ids = evaluation_episodes(settings, actor, keys, concurrency=concurrency, max_steps=max_steps,
                              screenshots=screenshots, on_progress=on_progress)
    return success_by_site(trajectory_scores(settings, ids))


def evaluation_episodes(settings: Settings, actor: Path, keys: list[str], *, concurrency: int = 4,
                        max_steps: int | None = None, screenshots: bool = False,
                        on_progress: Callable[[str, int, int], None] | None = None) -> list[int]:
    """Greedy episodes of ``actor`` on the tasks ``keys``, in chunks of :data:`CHUNK` (idempotent jobs: the episodes
    this actor folder already has at this horizon are reused); their trajectory ids."""
    attempt = evaluation_attempt(settings, actor, max_steps)
    progress = on_progress or (lambda label, done, total: None)
    ids: list[int] = []
    policy = rollout_policy(settings, str(actor.resolve()))  # distributed: through the actor service
    for start in range(0, len(keys), CHUNK):
        progress("evaluate", start, len(keys))
        result = rollout_run(RolloutRequest(
            task_keys=keys[start:start + CHUNK], phase=EVAL_PHASE, attempt=attempt, purpose="eval",
            policy=policy, concurrency=concurrency,
            max_steps=max_steps if max_steps is not None else MAX_STEPS, screenshots=screenshots,
        ))
        ids.extend(result.trajectory_ids)
    progress("evaluate", len(keys), len(keys))
    return ids


class TaskScore(NamedTuple):
    """One evaluated trajectory: its task, the task's site and the evaluator's score (0 when unscored)."""

    key: str
    site: str
    score: float


def trajectory_scores(settings: Settings, trajectory_ids: list[int]) -> list[TaskScore]:
    """The :class:`TaskScore` of each of ``trajectory_ids``, read in one query."""
    from sqlalchemy import select

    from webrl.db import models as m

    with session_scope(settings) as s:
        rows = s.execute(select(m.Task.key, m.Task.site, m.TrajectoryRow.env_score).join(m.Task)
                         .where(m.TrajectoryRow.id.in_(trajectory_ids)).order_by(m.TrajectoryRow.id)).all()
    return [TaskScore(key, site, float(score or 0.0)) for key, site, score in rows]


def success_by_site(scores: list[TaskScore]) -> dict[str, tuple[int, float]]:
    """``{site: (n_trajectories, mean score)}`` plus ``overall``."""
    by_site: dict[str, list[float]] = {}
    for score in scores:
        by_site.setdefault(score.site, []).append(score.score)
    out = {site: (len(vals), sum(vals) / len(vals)) for site, vals in by_site.items()}
    out["overall"] = (len(scores), sum(s.score for s in scores) / len(scores) if scores else 0.0)
    return out


def solved_task_keys(scores: list[TaskScore]) -> list[str]:
    """Keys of the tasks with a trajectory the evaluator scored a success (``rewards.is_success``), sorted."""
    return sorted({score.key for score in scores if is_success(score.score)})
