"""Two `webrl train` runs in one database, with the same options and seed: each rolls out, labels and trains on its
own trajectories. Both draw the same tasks (same seed), so before trajectories carried their run the second run's
rollouts were "idempotently" skipped as the first's (made by another actor), and it trained on them."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.session import session_scope

pytestmark = [pytest.mark.slow, pytest.mark.browser]

#: The smoke preset cut to one phase of two tasks a stage and two steps an episode (as the distributed test's
#: two phases are), rewards from the sandbox evaluators, and the curriculum off: phase 1 trains on seed tasks drawn
#: by the run's seed, so both runs roll out the very same tasks (generated ones depend on sampled failures).
ONE_SMALL_PHASE = {"curriculum.phases": 1, "curriculum.enabled": False, "curriculum.tasks_per_phase": 2,
                   "curriculum.seed_tasks": 2, "evaluation.tasks": 2, "rollout.max_steps": 2, "rollout.chunk": 2}


def _phase_one(settings: Settings, run_id: int) -> tuple[list[m.TrajectoryRow], m.Phase]:
    """The run's phase-1 training rollouts (labels loaded) and its phase-1 row."""
    from webrl.db import repository as repo

    with session_scope(settings) as s:
        rows = repo.trajectories_for_phase(s, 1, purpose="train", run_id=run_id)
        phase = s.scalars(select(m.Phase).where(m.Phase.run_id == run_id, m.Phase.index == 1)).one()
        return rows, phase


def _trained_trajectories(settings: Settings, critic_version: str) -> set[int]:
    """The trajectories whose steps the phase that published ``critic_version`` trained on (its step values)."""
    with session_scope(settings) as s:
        return set(s.scalars(select(m.StepRow.trajectory_id).join(m.StepValue, m.StepValue.step_id == m.StepRow.id)
                             .where(m.StepValue.critic_version == critic_version)))


@pytest.mark.timeout(1500)  # bootstrap and two runs of two trainings' worth on a busy 2-core box
def test_two_runs_in_one_database_each_roll_out_and_train_on_their_own(world: Settings, tiny_actor: Path) -> None:
    from webrl.commands.train import ensure_ready, sandbox_if_needed
    from webrl.method.hyperparams import with_overrides
    from webrl.method.presets import PRESETS
    from webrl.orchestration.pipeline import Pipeline, PipelineOptions

    ensure_ready(world)
    hp = with_overrides(PRESETS["smoke"], ONE_SMALL_PHASE)
    runs = {}
    with sandbox_if_needed(world):
        for name in ("a", "b"):
            pipeline = Pipeline(world, PipelineOptions(run=name, actor=str(tiny_actor), hyperparams=hp))
            pipeline.run()
            runs[name] = pipeline.run_id
    (a, a_phase), (b, b_phase) = (_phase_one(world, runs[name]) for name in ("a", "b"))
    assert a_phase.state["kept_keys"] == b_phase.state["kept_keys"]  # the same tasks: the case that collided
    assert len(a) == len(b) == len(a_phase.state["kept_keys"]) > 0
    assert not {t.id for t in a} & {t.id for t in b}  # b rolled them out itself
    assert b_phase.metrics["rollout.rollouts"] == len(b)
    assert all(len(t.labels) == 1 for t in (*a, *b)) and b_phase.metrics["label.labelled"] == len(b)
    with session_scope(world) as s:  # nothing stored twice within a run, every trajectory of one run or none
        per_key = s.scalars(select(func.count()).select_from(m.TrajectoryRow).group_by(
            m.TrajectoryRow.task_id, m.TrajectoryRow.phase, m.TrajectoryRow.attempt, m.TrajectoryRow.run_id))
        assert set(per_key) == {1}
        own = {run_id: set(s.scalars(select(m.TrajectoryRow.id).where(m.TrajectoryRow.run_id == run_id)))
               for run_id in runs.values()}
        assert set().union(*own.values()) == set(s.scalars(select(m.TrajectoryRow.id)))
    # training: each run's job is its own (a new version, not the other's "already trained" checkpoint), and its
    # critic valued every step of its phase-1 rollouts and, replay included, no step of the other run's
    assert a_phase.state["critic_version"] != b_phase.state["critic_version"]
    for name, rows, phase in (("a", a, a_phase), ("b", b, b_phase)):
        trained = _trained_trajectories(world, phase.state["critic_version"])
        assert {t.id for t in rows if t.n_steps} <= trained <= own[runs[name]]
        assert phase.metrics["train.current_steps"] == sum(t.n_steps for t in rows)
