"""The contracts between services: unknown fields are rejected by name, and the typed clients round-trip a
model through the eager Celery dispatch (JSON on the wire)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from webrl import clients
from webrl.config import Settings
from webrl.contracts import (
    Contract,
    FilterRequest,
    GenerateRequest,
    ObserveRequest,
    PhaseJob,
    RolloutRequest,
    ScoreRequest,
    SftJob,
    StartState,
    StartValueRequest,
    ValueRequest,
)

VALID: dict[type[Contract], dict] = {
    RolloutRequest: {"task_keys": ["k"], "policy": {"kind": "oracle"}},
    ObserveRequest: {"task_keys": ["k"]},
    ValueRequest: {"task_keys": ["k"]},
    ScoreRequest: {"trajectory_ids": [1]},
    StartValueRequest: {"states": [{"key": "k", "intent": "x", "observation": "<p/>"}]},
    GenerateRequest: {"phase": 1, "parent_keys": ["k"], "n": 1},
    FilterRequest: {"task_keys": ["k"], "values": {"k": 0.5}, "critic_version": "c"},
    PhaseJob: {"phase": 1, "actor": "/a"},
    SftJob: {"base": "/b", "output": "/o"},
}


@pytest.mark.parametrize("model", list(VALID), ids=lambda m: m.__name__)
def test_an_unknown_field_is_rejected_by_name(model: type[Contract]) -> None:
    model.model_validate(VALID[model])
    with pytest.raises(ValidationError, match="mystery_knob"):
        model.model_validate({**VALID[model], "mystery_knob": 1})


def test_a_policy_spec_is_typed_by_its_kind() -> None:
    request = RolloutRequest.model_validate({"task_keys": ["k"], "policy": {"kind": "checkpoint", "path": "/a"}})
    assert type(request.policy).__name__ == "CheckpointSpec" and request.policy.temperature is None
    with pytest.raises(ValidationError, match=r"policy\.checkpoint\.url"):
        RolloutRequest.model_validate({"task_keys": ["k"], "policy": {"kind": "checkpoint", "path": "/a", "url": "u"}})


def test_one_start_state_for_observe_critic_and_orm() -> None:
    start = StartState(key="k", intent="Buy", observation="<p/>", url="http://s/")
    assert StartValueRequest(states=[start]).states[0] == start
    assert ValueRequest(states=[{"key": start.key, "intent": start.intent, "observation": start.observation}])


def test_the_typed_client_round_trips_through_eager_dispatch(settings: Settings) -> None:
    from webrl.db.migrate import upgrade

    upgrade(settings)
    with pytest.raises(ValueError, match="task_keys: unknown task keys"):  # the service's error, not a KeyError
        clients.taskgen_filter(FilterRequest(task_keys=["no/such"], values={"no/such": 0.5}, critic_version="c"))
    with pytest.raises(ValueError, match="parent_keys"):
        clients.taskgen_generate(GenerateRequest(phase=1, parent_keys=["no/such"], n=1))
