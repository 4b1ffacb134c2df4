"""Each test task's intent template and the templates training saw, read from the task table
(:class:`webrl.method.template_split.TemplateGroups`).

A template is the task's site and ``intent_template_id`` (:func:`webrl.store.template_prior.template_of`); it is
seen when a train-split task shares it (the curriculum's generated tasks never instantiate a held-out one) and
held-out otherwise. Tasks without an ``intent_template_id`` (external task files) have no template here.
"""

from __future__ import annotations

import random
from collections.abc import Collection

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.session import session_scope
from webrl.method.rewards import is_success
from webrl.method.template_split import TemplateGroups
from webrl.store.template_prior import template_of


def _has_template(task: m.Task) -> bool:
    return (task.config or {}).get("intent_template_id") is not None


def template_groups_in(session: Session) -> TemplateGroups:
    """{test task key: template} and the set of templates of the train split."""
    tests = {t.key: template_of(t) for t in repo.tasks_where(session, split="test") if _has_template(t)}
    seen = frozenset(template_of(t) for t in repo.tasks_where(session, split="train") if _has_template(t))
    return TemplateGroups(template_of=tests, seen=seen)


def template_groups(settings: Settings) -> TemplateGroups:
    """:func:`template_groups_in` in a session of its own."""
    with session_scope(settings) as s:
        return template_groups_in(s)


def evaluation_solved(settings: Settings, keys: Collection[str], *, phase: int, attempt: int,
                      run_id: int = m.NO_RUN) -> set[str]:
    """The tasks of ``keys`` whose evaluation episode (purpose "eval") of ``phase``, ``attempt`` and ``run_id`` the
    evaluator scored a success (``rewards.is_success``): what ``webrl eval`` just measured for one actor."""
    with session_scope(settings) as s:
        rows = s.execute(
            select(m.Task.key, m.TrajectoryRow.env_score).join(m.Task, m.TrajectoryRow.task_id == m.Task.id)
            .where(m.TrajectoryRow.purpose == "eval", m.TrajectoryRow.phase == phase,
                   m.TrajectoryRow.attempt == attempt, m.TrajectoryRow.run_id == run_id,
                   m.Task.key.in_(list(keys)))).all()
    return {key for key, score in rows if is_success(float(score or 0.0))}


def stratified_sample(settings: Settings, keys: list[str], n: int, seed: int, split: str = "test") -> list[str]:
    """A fixed sample of ``n`` of ``keys`` (tasks of ``split``), templates taken in turn, each template's tasks in an
    order seeded by ``seed``: one task of every template before a second of any. In the order of ``keys``. The run's
    fixed evaluation sample (``evaluation.subset``) and the offline bench's ``--stratified`` are this sample.

    Each turn takes the held-out templates (no train task shares them) first, then the seen ones in an order seeded
    by ``seed``: a sample smaller than the templates still holds every held-out template, where one template's
    tasks move the test total by 12 points. A sample of one task per template is the same whatever the order."""
    with session_scope(settings) as s:
        tasks = {t.key: t for t in repo.tasks_where(s, split=split)}
        trained = {template_of(t) for t in repo.tasks_where(s, split="train") if _has_template(t)}
    by_template: dict[str, list[str]] = {}
    held_out: set[str] = set()
    for key in keys:
        task = tasks.get(key)
        name = str((task.config or {}).get("intent_template_id") if task is not None else None)
        by_template.setdefault(name, []).append(key)
        if split == "test" and task is not None and _has_template(task) and template_of(task) not in trained:
            held_out.add(name)
    rng = random.Random(seed * 7919 + 17)
    queues = {name: rng.sample(group, len(group)) for name, group in sorted(by_template.items())}
    seen = sorted(name for name in queues if name not in held_out)
    random.Random(seed * 7919 + 18).shuffle(seen)
    turn = [queues[name] for name in sorted(held_out & queues.keys())] + [queues[name] for name in seen]
    chosen: list[str] = []
    while len(chosen) < min(n, len(keys)):
        for queue in turn:
            if queue and len(chosen) < n:
                chosen.append(queue.pop())
    return sorted(chosen, key=keys.index)


def validation_sample(settings: Settings, n: int) -> list[str]:
    """The suite's fixed validation tasks: :func:`stratified_sample` of ``n`` of its train-split tasks (origin "seed",
    never a generated or a test task) under seed 0 whatever a run's seed, so every run, seed and offline comparison
    validates an update on the same tasks (``evaluation.validation_tasks``)."""
    with session_scope(settings) as s:
        keys = [t.key for t in repo.tasks_where(s, split="train", origin="seed")]
    if not keys:
        raise RuntimeError("no train tasks in the database; run `webrl tasks load` first")
    return stratified_sample(settings, keys, n, 0, "train")
