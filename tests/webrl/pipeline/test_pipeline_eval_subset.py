"""Phases between the first and the last may evaluate a fixed, template-stratified subset of the test tasks."""

from __future__ import annotations

from webrl.config import Settings
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.hyperparams import DEFAULTS, with_overrides
from webrl.orchestration.pipeline import Pipeline, PipelineOptions
from webrl.sandbox.tasks.suite import load_suite


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
