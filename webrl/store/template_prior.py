"""The curriculum filter's judge before a critic exists: how often the actor solved a task's template so far.

WebRL keeps a generated task when the critic's value of its start state lies in [0.05, 0.75] (paper section
3.2): neither hopeless nor solved. Phase 1 has no critic yet (the paper's authors used the ORM there); with
neither, every generated task was kept, and a weak actor's failures grew tasks it failed again (the first
pretrained CPU demo: 0/24 phase-1 rollouts solved), leaving WebRL's A > 0 loss nothing to learn from.

Generated sandbox tasks are instantiations of intent templates (the failed parent's own and related ones), so the
run's own earlier training rollouts already estimate each template's difficulty for this actor. The value of a task
is the posterior mean of its template's success rate under a Beta(a, b) prior::

    V(task) = (s_T + a) / (n_T + a + b)

with s_T the rewarded and n_T all labelled training rollouts of the task's template T so far. With the default
prior (a, b) = (1, 4) an unseen template is worth 0.2 (in the band: worth trying), one failed 16 times of 16 drops to
0.048 (out: hopeless for now), and one solved 12 times of 12 rises to 0.76 (out: learnt). Only training rollouts
count: the test split never steers the curriculum.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.db import models as m
from webrl.db import repository as repo
from webrl.method.rewards import is_success

PRIOR: tuple[float, float] = (1.0, 4.0)


def template_of(task: m.Task) -> str:
    """A task's intent template (its site and template id; the intent itself when it has none)."""
    template = (task.config or {}).get("intent_template_id")
    return f"{task.site}:{template}" if template is not None else f"{task.site}:intent:{task.intent_norm}"


def template_record(session: Session, phases: Sequence[int], orm_version: str, *,
                    run_id: int) -> tuple[Counter[str], Counter[str]]:
    """(successes, attempts) per template over run ``run_id``'s labelled training rollouts of ``phases`` (another
    run's actor is not the one whose difficulty this estimates)."""
    successes: Counter[str] = Counter()
    attempts: Counter[str] = Counter()
    for phase in phases:
        for traj in repo.trajectories_for_phase(session, phase, purpose="train", run_id=run_id):
            label = repo.label_of(traj, orm_version)
            if label is None:
                continue
            template = template_of(traj.task)
            attempts[template] += 1
            successes[template] += int(is_success(label.reward))
    return successes, attempts


def template_values(session: Session, task_keys: Sequence[str], phases: Sequence[int], orm_version: str, *,
                    run_id: int, prior: tuple[float, float] = PRIOR) -> dict[str, float]:
    """V(task) = (s_T + a) / (n_T + a + b) for each of ``task_keys``, from run ``run_id``'s rollouts (module
    docstring)."""
    a, b = prior
    successes, attempts = template_record(session, phases, orm_version, run_id=run_id)
    tasks = session.scalars(select(m.Task).where(m.Task.key.in_(list(task_keys)))).all()
    values: dict[str, float] = {}
    for task in tasks:
        template = template_of(task)
        values[task.key] = (successes[template] + a) / (attempts[template] + a + b)
    missing = sorted(set(task_keys) - set(values))
    if missing:
        raise LookupError(f"unknown task keys: {missing[:5]}")
    return values
