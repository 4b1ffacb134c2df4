"""The validate stage (``evaluation.validation_tasks``): the phase's updated actor and its start actor, greedy on the
suite's fixed validation sample of train-split tasks, episodes of their own (purpose "validate"); an update that
loses significantly more of them than it gains is refused and the start actor published again; a stage without
validation tasks, or after an update that did not run, passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.method.hyperparams import with_overrides
from webrl.method.presets import PRESETS
from webrl.orchestration.pipeline import PhaseState, Pipeline, PipelineOptions
from webrl.orchestration.stored_evaluation import key_for
from webrl.store.evaluations import TaskResult, find, save
from webrl.wire.contracts import VALIDATION_ATTEMPT, VALIDATION_PURPOSE

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _validation_episodes(settings: Settings, run_id: int) -> list[tuple[str, int]]:
    with session_scope(settings) as s:
        rows = s.execute(select(m.Task.split, m.TrajectoryRow.attempt).join(m.Task).where(
            m.TrajectoryRow.purpose == VALIDATION_PURPOSE, m.TrajectoryRow.run_id == run_id)).all()
    return sorted((split, attempt) for split, attempt in rows)


def test_an_update_is_validated_on_train_tasks_and_a_collapse_is_refused(smoke_world: Settings,
                                                                         tiny_actor: Path) -> None:
    from webrl.sandbox.server import running_sandbox, sandbox_ports

    world = smoke_world
    updated = Pipeline.of_run(world, "smoke").phase_state(1).actor_path  # the smoke run's phase-1 actor
    assert updated is not None and updated != str(tiny_actor)
    hp = with_overrides(PRESETS["smoke"], {"evaluation.validation_tasks": 6})
    pipeline = Pipeline(world, PipelineOptions(run="validated", actor=str(tiny_actor), hyperparams=hp))
    keys = pipeline.validation_keys()
    assert len(keys) == 6 and len(set(keys)) == 6
    again = Pipeline(world, PipelineOptions(run="validated-seed1", actor=str(tiny_actor), seed=1, hyperparams=hp))
    assert again.validation_keys() == keys  # the same sample whatever the run's seed

    # both actors run for real: six episodes each, train-split tasks, attempts of their own
    with running_sandbox(world, ports=sandbox_ports(world)):
        metrics, state = pipeline._stage_validate(1, PhaseState(actor_path=updated))
    assert _validation_episodes(world, pipeline.run_id) == sorted(
        [("train", VALIDATION_ATTEMPT)] * 6 + [("train", VALIDATION_ATTEMPT + 1)] * 6)
    assert metrics["keys"] == keys and metrics["tasks"] == 6
    assert metrics["gained"] == len(set(metrics["solved_tasks"]) - set(metrics["start_solved_tasks"]))
    assert metrics["lost"] == len(set(metrics["start_solved_tasks"]) - set(metrics["solved_tasks"]))
    assert state.actor_path == (updated if metrics["accepted"] else str(tiny_actor))
    for actor in (tiny_actor, updated):  # stored under each actor's content key for the next run
        assert find(world, key_for(world, actor, keys, hp.rollout, split="train")) is not None

    # the start actor solved all six and the update none: 6 lost, p = 1/64 < 0.05, the start actor published again
    for actor, score in ((tiny_actor, 1.0), (updated, 0.0)):
        save(world, key_for(world, actor, keys, hp.rollout, split="train"),
             {k: TaskResult(site="shop", score=score, steps=3) for k in keys})
    refused = Pipeline(world, PipelineOptions(run="refused", actor=str(tiny_actor), hyperparams=hp))
    metrics, state = refused._stage_validate(1, PhaseState(actor_path=updated, actor_version="v-updated"))
    assert (metrics["gained"], metrics["lost"], metrics["accepted"]) == (0, 6, False)
    assert metrics["p"] == pytest.approx(1 / 64, abs=1e-6) and metrics["published_solved_tasks"] == sorted(keys)
    assert state.actor_path == str(tiny_actor) and state.actor_version is None
    assert _validation_episodes(world, refused.run_id) == []  # both read back: not one episode ran

    # 2 of the 6 lost, none gained: p = 0.25 passes the sign test; the non-inferiority margin of 1 refuses it
    save(world, key_for(world, updated, keys, hp.rollout, split="train"),
         {k: TaskResult(site="shop", score=float(i >= 2), steps=3) for i, k in enumerate(keys)})
    margin = with_overrides(hp, {"evaluation.validation_margin": 1})
    for run, hyperparams, accepted in (("sign-test-only", hp, True), ("margin", margin, False)):
        judged = Pipeline(world, PipelineOptions(run=run, actor=str(tiny_actor), hyperparams=hyperparams))
        metrics_m, state_m = judged._stage_validate(1, PhaseState(actor_path=updated, actor_version="v-updated"))
        assert (metrics_m["gained"], metrics_m["lost"], metrics_m["accepted"]) == (0, 2, accepted)
        assert metrics_m["refused_by"] == (None if accepted else "margin")
        assert state_m.actor_path == (updated if accepted else str(tiny_actor))

    # phase 2 starts from what phase 1 published: its validated solved tasks are read back, not evaluated again
    refused.store.finish_stage(1, "validate", (metrics, state), last=False)
    assert refused._start_validation(2, keys, str(tiny_actor)) == set(keys)

    # no validation tasks, or an update that did not run: the stage passes
    plain = Pipeline(world, PipelineOptions(run="unvalidated", actor=str(tiny_actor), hyperparams=PRESETS["smoke"]))
    assert plain._stage_validate(1, PhaseState(actor_path=updated)) == ({"skipped": True},
                                                                         PhaseState(actor_path=updated))
    kept = Pipeline(world, PipelineOptions(run="kept-validated", actor=str(tiny_actor), hyperparams=hp))
    kept.store.finish_stage(1, "train", ({"actor_skipped": 1}, PhaseState(actor_path=updated)), last=False)
    assert kept._stage_validate(1, PhaseState(actor_path=updated))[0] == {"skipped": True}
