"""``webrl probe build``: the flips probe of an actor (``webrl.models.probe``).

1. The sandbox oracle demonstrates train tasks, templates taken in turn (``bootstrap.demo_tasks``), stored as
   demonstrations of no run;
2. every step becomes the actor prompt the policy would see there (its served prompt budget) and the oracle's
   response;
3. the actor, teacher-forced, keeps the steps whose every action token it picks greedily, up to ``per_site`` per
   site, spread over the tasks (one step per task first, then a second, ...);
4. the steps are written to a ``*.jsonl.gz`` file that a phase job names as its ``probe``.

``webrl probe anchors`` runs stages 1 and 2 only and writes every step, in the same format: the anchor steps
``actor.anchor_kl`` holds the policy on (a job's ``anchors``), from tasks other than the probe's so that the
flips probe still measures states the update was not held on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.progress import track

from webrl.config import Settings
from webrl.models.probe import ProbeStep, encode_probe, probe_matches, save_probe

#: Oracle demonstrations per rollout job (stored when the job ends, so a rerun skips finished chunks).
DEMO_CHUNK = 32


@dataclass(frozen=True)
class ProbeBuild:
    """What ``webrl probe build`` made: the file, the steps kept per site, and the candidates it tried."""

    path: Path
    kept: dict[str, int]
    candidates: int
    tasks: int


def _candidate_steps(settings: Settings, trajectory_ids: list[int], tokenizer: object) -> list[ProbeStep]:
    """Each successful demonstration's steps as (actor prompt, oracle response) probe candidates."""
    from webrl.db import models as m
    from webrl.db.repository import load_trajectory
    from webrl.db.session import session_scope
    from webrl.method.rewards import is_success
    from webrl.prompts.actor import render_actor_prompt

    out = []
    with session_scope(settings) as session:
        rows = session.query(m.TrajectoryRow).filter(m.TrajectoryRow.id.in_(trajectory_ids))
        for row in rows.order_by(m.TrajectoryRow.id):
            if row.env_score is None or not is_success(row.env_score):
                continue
            traj = load_trajectory(row)
            for t, step in enumerate(traj.steps):
                prompt = render_actor_prompt(tokenizer, traj.intent, list(traj.steps[:t]), step.observation.html,
                                             max_tokens=settings.actor.max_prompt_tokens)
                out.append(ProbeStep(task_key=row.task.key, site=row.task.site, index=step.index, prompt=prompt,
                                     completion=step.response))
    return out


def spread_over_tasks(steps: list[ProbeStep], seed: int) -> list[ProbeStep]:
    """``steps`` reordered so each task gives one step before any gives a second (seeded within a round)."""
    by_task: dict[str, list[ProbeStep]] = {}
    for step in steps:
        by_task.setdefault(step.task_key, []).append(step)
    rng = random.Random(seed)
    queues = [rng.sample(group, len(group)) for _, group in sorted(by_task.items())]
    rng.shuffle(queues)
    out: list[ProbeStep] = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop())
    return out


def oracle_steps(settings: Settings, tokenizer: object, *, per_template: int, seed: int, concurrency: int,
                 exclude_tasks: frozenset[str] = frozenset(), max_tasks: int | None = None
                 ) -> tuple[list[ProbeStep], int]:
    """Stages 1-2: the oracle's successful demonstrations of ``per_template`` train tasks per template (less
    ``exclude_tasks``; the first ``max_tasks`` of them when given), every step as (actor prompt rendered with
    ``tokenizer``, oracle response); and the number of tasks demonstrated."""
    from webrl.db.migrate import upgrade
    from webrl.orchestration.bootstrap import demo_tasks
    from webrl.orchestration.task_suite import load_checked
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import build_suite, task_key
    from webrl.wire.clients import rollout_run
    from webrl.wire.contracts import DEMONSTRATION_PURPOSE, OracleSpec, RolloutRequest

    settings.ensure_dirs()
    upgrade(settings)
    load_checked(settings, settings.seed)
    tasks = demo_tasks(build_suite(settings.seed)["train"], per_template, seed)
    keys = [key for key in (task_key("train", t) for t in tasks) if key not in exclude_tasks][:max_tasks]
    trajectory_ids: list[int] = []
    with running_sandbox(settings, sandbox_ports(settings)):
        for start in track(range(0, len(keys), DEMO_CHUNK), description="oracle demonstrations"):
            rollout = rollout_run(RolloutRequest(
                task_keys=keys[start:start + DEMO_CHUNK], phase=0, attempt=seed, purpose=DEMONSTRATION_PURPOSE,
                policy=OracleSpec(corrupt=0.0, seed=seed), concurrency=concurrency))
            trajectory_ids.extend(rollout.trajectory_ids)
    return _candidate_steps(settings, trajectory_ids, tokenizer), len(keys)


def build_anchors(settings: Settings, actor: Path, output: Path, *, per_template: int = 1, seed: int = 2,
                  exclude: Sequence[ProbeStep] = (), concurrency: int = 4, max_tasks: int | None = None) -> ProbeBuild:
    """Stages 1-2 and every step written: the anchor steps of ``actor`` (its tokenizer renders the prompts), from
    train tasks none of ``exclude`` (the flips probe) comes from."""
    from webrl.models.loading import load_tokenizer

    steps, tasks = oracle_steps(settings, load_tokenizer(actor, settings), per_template=per_template, seed=seed,
                                concurrency=concurrency, exclude_tasks=frozenset(s.task_key for s in exclude),
                                max_tasks=max_tasks)
    steps.sort(key=lambda s: (s.site, s.task_key, s.index))
    counts: dict[str, int] = {}
    for step in steps:
        counts[step.site] = counts.get(step.site, 0) + 1
    return ProbeBuild(path=save_probe(steps, output), kept=dict(sorted(counts.items())), candidates=len(steps),
                      tasks=tasks)


def build_probe(settings: Settings, actor: Path, output: Path, *, per_site: int = 24, per_template: int = 1,
                seed: int = 1, concurrency: int = 4, batch_size: int = 4) -> ProbeBuild:
    """Run stages 1-4 of the module docstring and return what was written."""
    from webrl.models.loading import load_causal_lm
    from webrl.orchestration.bootstrap import COMPLETION_BUDGET

    model, tokenizer = load_causal_lm(actor, settings)
    found, tasks = oracle_steps(settings, tokenizer, per_template=per_template, seed=seed, concurrency=concurrency)
    candidates = spread_over_tasks(found, seed)
    kept: list[ProbeStep] = []
    counts: dict[str, int] = {}
    for start in track(range(0, len(candidates), batch_size), description="teacher-forced greedy check"):
        chunk = [s for s in candidates[start:start + batch_size] if counts.get(s.site, 0) < per_site]
        if not chunk:
            continue
        encoded = encode_probe(tokenizer, chunk, settings.actor.max_prompt_tokens + COMPLETION_BUDGET)
        for step, ok in zip(chunk, probe_matches(model, tokenizer, encoded, batch_size=batch_size), strict=True):
            if ok and counts.get(step.site, 0) < per_site:
                kept.append(step)
                counts[step.site] = counts.get(step.site, 0) + 1
    kept.sort(key=lambda s: (s.site, s.task_key, s.index))
    return ProbeBuild(path=save_probe(kept, output), kept=dict(sorted(counts.items())), candidates=len(candidates),
                      tasks=tasks)
