"""The curriculum filter never leaves a phase empty: top-up order, and a phase without rollouts trains nothing."""

from __future__ import annotations

from webrl.config import Settings
from webrl.db.migrate import upgrade
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.orchestration.pipeline import PhaseState, Pipeline, PipelineOptions, nearest_to_band


def test_nearest_to_band_orders_by_distance_to_the_interval() -> None:
    values = {"a": 0.0, "b": 0.9, "c": 0.04, "d": 0.5, "e": 0.001, "f": 0.8}
    # distances to [0.05, 0.75]: a .05, b .15, c .01, d 0, e .049, f .05 (ties keep the given order)
    assert nearest_to_band(list(values), values, 0.05, 0.75) == ["d", "c", "e", "a", "f", "b"]
    assert nearest_to_band([], values, 0.05, 0.75) == []


def test_a_phase_without_rollouts_carries_the_actor_over(settings: Settings) -> None:
    upgrade(settings)
    pipeline = Pipeline(settings, PipelineOptions(run="empty", actor="/models/actor-sft",
                                                  hyperparams=with_overrides(DEFAULTS, {"curriculum.phases": 1})))
    metrics, state = pipeline._stage_train(1, PhaseState())
    assert metrics == {"skipped": True}
    assert state == PhaseState(actor_path="/models/actor-sft")


def test_solved_share_puts_new_instances_of_solved_templates_ahead_of_the_breadth(settings: Settings) -> None:
    """``curriculum.solved_share``: a phase's first tasks are new instances of the templates the run solved (here
    half of a 4-task quota), then the tasks grown in breadth from its failures; the templates judge keeps them first."""
    from webrl.agent.schemas import Observation, Step, Trajectory
    from webrl.db import repository as repo
    from webrl.db.session import session_scope
    from webrl.method.rewards import EVALUATOR_LABELS
    from webrl.sandbox.tasks.suite import load_suite

    upgrade(settings)
    load_suite(settings, settings.seed)
    record = with_overrides(DEFAULTS, {"curriculum.tasks_per_phase": 4, "curriculum.candidates_per_phase": 6,
                                       "curriculum.solved_share": 0.5})
    pipeline = Pipeline(settings, PipelineOptions(run="share", hyperparams=record))
    with session_scope(settings) as s:
        shopping = [t for t in repo.tasks_where(s, split="train", origin="seed") if t.site == "shopping"]
        solved, failed = shopping[0], next(t for t in shopping if t.config["intent_template_id"]
                                           != shopping[0].config["intent_template_id"])
        for task, reward in ((solved, 1.0), (failed, 0.0)):
            steps = [Step(index=0, observation=Observation(html="<html></html>", url="http://s/"), response="exit()")]
            tid = repo.save_trajectory(s, task.id, 0, 0, Trajectory(task_id=task.key, intent=task.intent, steps=steps),
                                       run_id=pipeline.run_id).id
            repo.save_label(s, tid, EVALUATOR_LABELS, p_yes=reward, threshold=0.5)
        solved_template = solved.config["intent_template_id"]

    metrics, state = pipeline._stage_generate(1, PhaseState())
    assert metrics["solved_instances"] == 2 and metrics["generated"] == 8 and metrics["failed_parents"] == 1
    with session_scope(settings) as s:
        rows = repo.tasks_by_keys(s, state.candidate_keys)
        template_of = {t.key: t.config["intent_template_id"] for t in rows}
        parent_of = {t.key: t.parent_id for t in rows}
    assert [template_of[k] for k in state.candidate_keys[:2]] == [solved_template] * 2
    assert [parent_of[k] for k in state.candidate_keys] == [solved.id] * 2 + [failed.id] * 6  # then the breadth

    metrics, state = pipeline._stage_filter(1, state)
    assert metrics["judge"] == "templates" and len(state.kept_keys) == 4
    assert [template_of[k] for k in state.kept_keys[:2]] == [solved_template] * 2

    paper = Pipeline(settings, PipelineOptions(run="paper", hyperparams=with_overrides(record, {
        "curriculum.solved_share": 0.0})))
    assert paper._solved_template_instances(1) == []  # WebRL's: every task from failures
