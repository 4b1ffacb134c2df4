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
