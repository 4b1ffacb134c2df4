"""What the pipeline's stages measure and read back from the stored trajectories: success on the test tasks, the
ORM's agreement with the evaluators, the actor versions that answered, and a phase's failed tasks. Success is
:func:`webrl.method.rewards.is_success` and a trajectory's label the run's ORM's (:func:`webrl.db.repository.label_of`)
throughout. Reporting only, except :func:`failed_task_keys`, which the next phase's generator evolves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.session import session_scope
from webrl.method.rewards import is_success

if TYPE_CHECKING:
    from webrl.orchestration.evaluate import TaskScore


def evaluation_metrics(settings: Settings, trajectory_ids: list[int]) -> dict[str, Any]:
    """Success overall and per site, and the solved task keys, from one read of the trajectories."""
    from webrl.orchestration.evaluate import trajectory_scores

    return metrics_of_scores(trajectory_scores(settings, trajectory_ids))


def metrics_of_scores(scores: list[TaskScore]) -> dict[str, Any]:
    """Success overall and per site, and the solved task keys, of per-task scores (episodes or a stored
    evaluation: :mod:`webrl.orchestration.stored_evaluation`)."""
    from webrl.orchestration.evaluate import solved_task_keys, success_by_site

    by_site = success_by_site(scores)
    n, overall = by_site.pop("overall")
    return {"success": overall, "n": n, **{f"success_{site}": rate for site, (_, rate) in sorted(by_site.items())},
            "solved": solved_task_keys(scores)}


def orm_agreement(settings: Settings, trajectory_ids: list[int], orm_version: str, *, judged: bool) -> dict[str, Any]:
    """How often the reward of the ORM ``orm_version`` agrees with the sandbox evaluators (reported, never trained
    on).

    ``judge`` names who gave the reward: ``"orm:<version>"`` when an ORM ``judged``, or ``"evaluators"``; then
    ``orm_accuracy`` is None (the evaluators compared with themselves would read 100%)."""
    agree = positives = total = 0
    with session_scope(settings) as s:
        for tid in trajectory_ids:
            traj = s.get(m.TrajectoryRow, tid)
            label = repo.label_of(traj, orm_version) if traj else None
            if traj is None or label is None or traj.env_score is None:
                continue
            total += 1
            positives += int(is_success(label.reward))
            agree += int(is_success(label.reward) == is_success(traj.env_score))
    return {"labelled": total, "reward_rate": positives / total if total else 0.0,
            "judge": f"orm:{orm_version}" if judged else "evaluators",
            "orm_accuracy": agree / total if judged and total else None}


def actor_versions(settings: Settings, trajectory_ids: list[int]) -> list[str]:
    """The actor versions the trajectories record (each as the policy that made it answered)."""
    with session_scope(settings) as s:
        rows = s.scalars(select(m.TrajectoryRow.actor_version).where(m.TrajectoryRow.id.in_(trajectory_ids)))
        return sorted(set(rows))


def attempted_task_keys(trajectories: Sequence[m.TrajectoryRow]) -> list[str]:
    """The tasks the trajectories attempted (their tasks loaded), sorted."""
    return sorted({t.task.key for t in trajectories})


def solved_task_keys_of(trajectories: Sequence[m.TrajectoryRow], orm_version: str) -> list[str]:
    """Tasks of ``trajectories`` (tasks and labels loaded) with an episode the ORM ``orm_version`` judged a success,
    sorted."""
    return sorted({t.task.key for t in trajectories
                   if (label := repo.label_of(t, orm_version)) is not None and is_success(label.reward)})


def failed_task_keys(trajectories: Sequence[m.TrajectoryRow], orm_version: str) -> list[str]:
    """Tasks of ``trajectories`` (tasks and labels loaded) that the ORM ``orm_version`` judged failed, sorted:
    what the next phase's generator evolves. A trajectory it has not judged is neither failed nor solved."""
    failed: set[str] = set()
    for traj in trajectories:
        label = repo.label_of(traj, orm_version)
        if label is not None and not is_success(label.reward):
            failed.add(traj.task.key)
    return sorted(failed)
