"""The stage table names each stage's method in the order a phase runs them; a phase runs the stages it has not
finished, records each one after it ran, and only the run's own ORM says which tasks failed."""

from __future__ import annotations

from typing import Any

from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.orchestration.pipeline import (
    BASELINE_STAGES,
    BASELINE_TABLE,
    PHASE_TABLE,
    STAGES,
    PhaseState,
    Pipeline,
    PipelineOptions,
    StageReport,
)
from webrl.orchestration.pipeline_metrics import failed_task_keys


def test_the_stage_table_lists_the_methods_stages_in_order() -> None:
    assert STAGES == tuple(PHASE_TABLE) == ("generate", "filter", "rollout", "label", "train", "validate", "evaluate")
    assert BASELINE_STAGES == tuple(BASELINE_TABLE) == ("evaluate", "seed-rollout")
    for table in (PHASE_TABLE, BASELINE_TABLE):
        for stage, method in table.items():
            assert method is getattr(Pipeline, f"_stage_{stage.replace('-', '_')}")


def test_a_phase_runs_its_unfinished_stages_in_order_and_records_each(settings: Settings) -> None:
    upgrade(settings)
    reports: list[StageReport] = []
    pipeline = Pipeline(settings, PipelineOptions(run="table"), on_stage=reports.append)
    ran: list[str] = []

    def stage(name: str, **changes: Any):
        def run(p: Pipeline, index: int, state: PhaseState) -> tuple[dict[str, Any], PhaseState]:
            ran.append(name)
            return {"seen": list(state.kept_keys)}, state.with_(**changes)
        return run

    table = {"first": stage("first", kept_keys=["a"]), "second": stage("second"), "third": stage("third")}
    pipeline._run_phase(1, {"first": table["first"]})  # a process that stopped after the first stage
    pipeline._run_phase(1, table)
    assert ran == ["first", "second", "third"]  # the resume skipped the finished stage
    assert pipeline.stages_done(1) == ["first", "second", "third"]
    assert pipeline.phase_state(1).kept_keys == ["a"]  # each stage saw the state the one before handed it
    metrics = pipeline.phase_metrics(1)
    assert metrics["second.seen"] == metrics["third.seen"] == ["a"] and "third.seconds" in metrics
    assert [(r.phase, r.stage) for r in reports] == [(1, "first"), (1, "second"), (1, "third")]


def test_the_failed_tasks_are_the_runs_orms_failures_only(settings: Settings) -> None:
    upgrade(settings)
    with session_scope(settings) as s:
        for i, labels in enumerate([{"orm-run": 0.1}, {"orm-run": 0.9, "orm-later": 0.1}, {"orm-later": 0.1}]):
            config = TaskConfig(task_id=i, sites=["shopping"], intent=f"Buy item {i}", start_url="__SHOPPING__/")
            task = repo.upsert_task(s, f"t/{i}", config, origin="seed", split="train")
            traj = Trajectory(task_id=f"t/{i}", intent=config.intent, steps=[
                Step(index=0, observation=Observation(html="<html></html>", url="http://s/"), response="exit()")])
            tid = repo.save_trajectory(s, task.id, 1, 0, traj).id
            for version, p in labels.items():
                repo.save_label(s, tid, version, p_yes=p, threshold=0.5)
    with session_scope(settings) as s:
        rows = repo.trajectories_for_phase(s, 1, run_id=m.NO_RUN)
        # t/1 failed only by a later ORM's judgement, t/2 was never judged by the run's ORM: neither failed
        assert failed_task_keys(rows, "orm-run") == ["t/0"]


def test_training_rollouts_sample_in_the_presets_dtype_and_evaluation_in_the_settings(settings: Settings) -> None:
    """cpu-demo samples its training rollouts in bf16 where the CPU computes it natively (``auto``); its greedy
    evaluations load the actor in the settings' dtype (fp32), whose results reproduce (webrl.store.evaluations)."""
    from webrl.method.presets import PRESETS
    from webrl.wire.contracts import CheckpointSpec

    upgrade(settings)
    pipeline = Pipeline(settings, PipelineOptions(run="dtypes", hyperparams=PRESETS["cpu-demo"]))
    sampled = pipeline._policy("actor", 0.7, "phase 1: rollout")
    greedy = pipeline._policy("actor", None, "phase 1: evaluate")
    assert isinstance(sampled, CheckpointSpec) and isinstance(greedy, CheckpointSpec)
    assert (sampled.dtype, sampled.temperature) == ("auto", 0.7)
    assert (greedy.dtype, greedy.temperature) == (None, None)


def test_sampled_rollouts_of_a_checkpoint_are_seeded_by_run_phase_and_attempt(settings: Settings) -> None:
    from webrl.method.presets import PRESETS
    from webrl.orchestration.pipeline import sampling_seed
    from webrl.wire.contracts import CheckpointSpec, EndpointSpec

    upgrade(settings)
    pipeline = Pipeline(settings, PipelineOptions(run="seeded", seed=3, hyperparams=PRESETS["cpu-demo"]))
    sampled = CheckpointSpec(path="actor", temperature=0.7)
    seeds = {(phase, attempt): pipeline.rollout_request(["k"], phase, sampled, "train", attempt=attempt).policy
             .sampling_seed for phase in (1, 2) for attempt in (0, 1)}
    assert seeds == {(p, a): sampling_seed(3, p, a) for p, a in seeds} and len(set(seeds.values())) == 4
    assert sampling_seed(4, 1, 0) != sampling_seed(3, 1, 0)
    greedy = pipeline.rollout_request(["k"], 1, CheckpointSpec(path="actor"), "eval").policy
    assert greedy.sampling_seed is None  # evaluation is greedy: nothing to seed
    assert pipeline.rollout_request(["k"], 1, EndpointSpec(temperature=0.7), "train").policy == EndpointSpec(
        temperature=0.7)  # an actor service samples as it serves
