"""The contracts between services: unknown fields are rejected by name, and the typed clients round-trip a
model through the eager Celery dispatch (JSON on the wire)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from webrl.config import Settings
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.wire import clients
from webrl.wire.contracts import (
    ActItem,
    ActResult,
    Contract,
    FilterRequest,
    GenerateRequest,
    ObserveRequest,
    OrmHeadJob,
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
    SftJob: {"base": "/b", "output": "/o", "trajectory_ids": [1]},
    OrmHeadJob: {"base": "/b", "output": "/o", "trajectory_ids": [1, 2]},
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


def test_a_rollout_request_refuses_a_repeated_task_key_naming_it() -> None:
    """Two copies of one task in a request would race to store one (task, phase, attempt, run) trajectory."""
    with pytest.raises(ValidationError) as refused:
        RolloutRequest.model_validate({"task_keys": ["a", "b", "a", "c", "b"], "policy": {"kind": "oracle"}})
    [error] = refused.value.errors()
    assert error["loc"] == ("task_keys",) and "repeated task keys" in error["msg"] and ": a, b" in error["msg"]
    distinct = RolloutRequest.model_validate({"task_keys": ["a", "b"], "policy": {"kind": "oracle"}})
    assert distinct.task_keys == ["a", "b"]


def test_one_start_state_for_observe_critic_and_orm() -> None:
    start = StartState(key="k", intent="Buy", observation="<p/>", url="http://s/")
    assert StartValueRequest(states=[start]).states[0] == start
    assert ValueRequest(states=[{"key": start.key, "intent": start.intent, "observation": start.observation}])


def test_the_knobs_in_contracts_are_the_hyperparameter_records() -> None:
    band = FilterRequest(task_keys=["k"], values={"k": 0.5}, critic_version="c")
    assert (band.low, band.high) == (DEFAULTS.curriculum.value_low, DEFAULTS.curriculum.value_high)
    assert ScoreRequest(trajectory_ids=[1]).threshold == DEFAULTS.reward.orm_threshold
    hp = with_overrides(DEFAULTS, {"advantage.gamma": 0.5})
    job = PhaseJob.model_validate_json(PhaseJob(phase=1, actor="/a", hyperparams=hp).model_dump_json())
    assert job.hyperparams == hp and PhaseJob(phase=1, actor="/a").hyperparams == DEFAULTS


def test_act_records_convert_from_and_to_the_policy_interface() -> None:
    from webrl.agent.policy import PolicyRequest
    from webrl.agent.schemas import Observation, Step, TaskConfig

    request = PolicyRequest(task=TaskConfig(task_id=1, sites=["shopping"], intent="Buy", start_url="u"),
                            intent="Buy", observation=Observation(html="<p/>", url="http://s/"),
                            history=[Step(index=0, observation=Observation(html="<p/>", url="http://s/"),
                                          response="click [3]")])
    item = ActItem.of(request)
    assert (item.intent, item.observation, item.history) == ("Buy", request.observation, ["click [3]"])
    response = ActResult(response="click [4]", token_ids=[1, 2], logprobs=[-0.1, -0.2], version="v1").policy_response()
    assert (response.response, response.token_ids, response.logprobs, response.version) == (
        "click [4]", [1, 2], [-0.1, -0.2], "v1")


def test_the_typed_client_round_trips_through_eager_dispatch(settings: Settings) -> None:
    from webrl.db.migrate import upgrade

    upgrade(settings)
    with pytest.raises(ValueError, match="task_keys: unknown task keys"):  # the service's error, not a KeyError
        clients.taskgen_filter(FilterRequest(task_keys=["no/such"], values={"no/such": 0.5}, critic_version="c"))
    with pytest.raises(ValueError, match="parent_keys"):
        clients.taskgen_generate(GenerateRequest(phase=1, parent_keys=["no/such"], n=1))


def test_histories_and_trajectories_are_capped_at_the_longest_episode() -> None:
    from webrl.agent.schemas import Observation, Step, Trajectory
    from webrl.wire.contracts import MAX_EPISODE_STEPS, CriticState

    page = {"html": "<p/>", "url": "http://127.0.0.1:7770/"}
    too_long = ["do(action=\"Scroll Down\")"] * (MAX_EPISODE_STEPS + 1)
    with pytest.raises(ValidationError, match="history"):
        ActItem(intent="x", observation=page, history=too_long)
    with pytest.raises(ValidationError, match="history"):
        CriticState(intent="x", observation="<p/>", history=too_long)
    steps = [Step(index=i, observation=Observation(**page), response=r) for i, r in enumerate(too_long)]
    with pytest.raises(ValidationError, match=f"at most {MAX_EPISODE_STEPS} steps") as refused:
        ScoreRequest(trajectories=[Trajectory(task_id="t", intent="x", steps=steps)])
    assert refused.value.errors()[0]["loc"][:2] == ("trajectories", 0)
    ActItem(intent="x", observation=page, history=too_long[1:])  # the longest episode's history is fine
