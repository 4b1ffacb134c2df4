"""The curriculum filter's start values: the critic is asked in requests it accepts, whatever the candidates."""

from __future__ import annotations

import pytest

from webrl.config import Settings
from webrl.db.migrate import upgrade
from webrl.orchestration import pipeline as pipeline_module
from webrl.orchestration.pipeline import Pipeline, PipelineOptions
from webrl.wire.contracts import MAX_STATES, ObserveResult, StartState, ValueRequest, ValueResult


def test_more_candidates_than_one_critic_request_holds_are_valued_in_order(settings: Settings,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The paper's 1,000 candidates a phase: the critic's request holds MAX_STATES states, so their start states go
    in consecutive requests and the values come back one per candidate, in the candidates' order."""
    upgrade(settings)
    pipeline = Pipeline(settings, PipelineOptions(run="r"))
    keys = [f"generated/{i}" for i in range(2 * MAX_STATES + 3)]
    asked: list[int] = []

    def value(request: ValueRequest) -> ValueResult:
        ValueRequest.model_validate(request.model_dump())  # what the critic service would accept
        asked.append(len(request.states or []))
        return ValueResult(critic_version="c", values=[int(s.key.split("/")[1]) / 1e4 for s in request.states or []])

    monkeypatch.setattr(pipeline, "critic_for_phase", lambda index: "/critic")
    monkeypatch.setattr(pipeline_module.clients, "rollout_observe", lambda request: ObserveResult(states=[
        StartState(key=key, intent=f"task {key}", observation="<html/>") for key in request.task_keys]))
    monkeypatch.setattr(pipeline_module.clients, "critic_value", value)
    values, judge = pipeline._start_values(keys, 2)
    assert asked == [MAX_STATES, MAX_STATES, 3] and judge == "critic:critic"
    assert values == {key: int(key.split("/")[1]) / 1e4 for key in keys}
