"""Phases between the first and the last may evaluate a fixed, template-stratified subset of the test tasks."""

from __future__ import annotations

import pytest

from webrl.config import Settings
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.orchestration.pipeline import PhaseState, Pipeline, PipelineOptions
from webrl.runs.report import phase_rows, subset_keys
from webrl.sandbox.tasks.suite import load_suite
from webrl.store.template_groups import template_groups


def test_the_subset_is_fixed_and_covers_the_templates(settings: Settings) -> None:
    upgrade(settings)
    load_suite(settings, 0)
    pipeline = Pipeline(settings, PipelineOptions(run="subset", hyperparams=with_overrides(
        DEFAULTS, {"curriculum.phases": 3, "evaluation.subset": 40})))
    keys = pipeline._task_keys(split="test", origin=None)
    with session_scope(settings) as s:
        template = {t.key: t.config["intent_template_id"] for t in repo.tasks_where(s, split="test")}
    subset = pipeline._stratified(keys, 40)
    assert len(set(subset)) == 40 and set(subset) <= set(keys)
    assert subset == pipeline._stratified(keys, 40)  # the same tasks every phase
    assert subset == sorted(subset, key=keys.index)
    covered = {template[k] for k in subset}
    assert len(covered) == min(40, len(set(template.values())))  # one per template before any second one
    groups = template_groups(settings)
    held_out = {groups.template_of[k] for k in keys if groups.template_of[k] not in groups.seen}
    assert held_out and held_out <= {groups.template_of[k] for k in subset}  # every held-out template, first
    assert pipeline._stratified(keys, 4) == sorted((k for k in subset if groups.template_of[k] in held_out),
                                                    key=keys.index)
    one_each = pipeline._stratified(keys, len(set(template.values())))
    assert set(subset) - set(one_each) == set()  # a smaller sample's tasks are the per-template sample's


def test_every_phase_records_the_tasks_it_evaluated_and_the_fixed_sample(settings: Settings,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Phase 0 and the last evaluate every test task, the phases between the fixed sample; each records the keys it
    evaluated (``keys``) and the sample (``sample``), so the report compares them on named tasks."""
    upgrade(settings)
    load_suite(settings, 0)
    hp = with_overrides(DEFAULTS, {"curriculum.phases": 3, "evaluation.subset": 40})
    pipeline = Pipeline(settings, PipelineOptions(run="sample", hyperparams=hp))
    evaluated: dict[int, list[str]] = {}

    def rollout(keys: list[str], phase: int, *args: object, **kwargs: object) -> list[int]:
        evaluated[phase] = keys
        return []

    monkeypatch.setattr(pipeline, "_rollout", rollout)
    monkeypatch.setattr(pipeline, "_evaluation_metrics", lambda ids: {"success": 0.0, "n": 0, "solved": []})
    every = pipeline._task_keys(split="test", origin=None, limit=hp.evaluation.tasks)
    sample = pipeline._stratified(every, 40)
    metrics = {i: pipeline._stage_evaluate(i, PhaseState(actor_path="actor"))[0] for i in range(4)}
    assert [len(evaluated[i]) for i in range(4)] == [len(every), 40, 40, len(every)]
    assert all(metrics[i]["keys"] == evaluated[i] and metrics[i]["sample"] == sample for i in range(4))
    assert [metrics[i]["subset"] for i in range(4)] == [False, True, True, False]
    assert pipeline.fixed_sample() == sample

    # stored, then phase 1 evaluated again later on the first 10 tasks (`webrl eval --run --limit 10`): the report
    # finds the sample in every phase and scores on it only the phases whose tasks hold it
    for i in range(4):
        pipeline._finish_stage(i, "evaluate", (metrics[i], PhaseState(actor_path="actor")), last=True)
    later = pipeline.evaluate_in_full(1, tasks=10)
    assert later["keys"] == every[:10] and later["sample"] == sample
    rows = phase_rows(settings, "sample")
    assert all(r["evaluate.sample"] == sample for r in rows) and subset_keys(rows) == set(sample)
    assert ["evaluate.success_subset" in r for r in rows] == [True, set(sample) <= set(every[:10]), True, True]

    whole = Pipeline(settings, PipelineOptions(run="whole", hyperparams=with_overrides(DEFAULTS, {
        "curriculum.phases": 3})))
    monkeypatch.setattr(whole, "_rollout", lambda keys, phase, *a, **k: [])
    monkeypatch.setattr(whole, "_evaluation_metrics", lambda ids: {"success": 0.0, "n": 0, "solved": []})
    assert whole.fixed_sample() is None
    middle = whole._stage_evaluate(1, PhaseState(actor_path="actor"))[0]
    assert middle["keys"] == every and "sample" not in middle and middle["subset"] is False


def test_a_later_stratified_evaluation_scores_the_runs_own_sample(settings: Settings,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A run trained with few evaluation tasks (the first 80, a sample of 40 of them): ``webrl eval --run
    --stratified 40`` scores the sample its middle phases scored, drawn from those 80, not one of all the tasks."""
    upgrade(settings)
    load_suite(settings, 0)
    hp = with_overrides(DEFAULTS, {"curriculum.phases": 3, "evaluation.tasks": 80, "evaluation.subset": 40})
    pipeline = Pipeline(settings, PipelineOptions(run="few", hyperparams=hp))
    monkeypatch.setattr(pipeline, "_rollout", lambda keys, phase, *a, **k: [])
    monkeypatch.setattr(pipeline, "_evaluation_metrics", lambda ids: {"success": 0.0, "n": 0, "solved": []})
    pipeline._finish_stage(1, "evaluate", (pipeline._stage_evaluate(1, PhaseState(actor_path="actor"))[0],
                                           PhaseState(actor_path="actor")), last=True)
    later = pipeline.evaluate_in_full(1, stratified=40)
    assert later["keys"] == pipeline.fixed_sample() and later["subset"] is True
    assert len(pipeline.evaluate_in_full(1)["keys"]) == len(pipeline._task_keys(split="test", origin=None))
