"""policy_from_spec: the rollout job's policy specs, with clear errors for bad ones."""

from __future__ import annotations

import pytest

from webrl.agent.policy import Policy
from webrl.config import Settings
from webrl.policy import policy_from_spec


def test_oracle_spec():
    policy = policy_from_spec({"kind": "oracle", "corrupt": 0.25, "seed": 3}, Settings())
    assert isinstance(policy, Policy) and type(policy).__name__ == "OraclePolicy"
    assert policy.corrupt == 0.25 and policy.seed == 3


@pytest.mark.parametrize(("spec", "message"), [
    ({}, "must be an object with a 'kind'"),
    ({"kind": "magic"}, "unknown policy kind 'magic'"),
    ({"kind": "oracle", "path": "x"}, "does not take path"),
    ({"kind": "checkpoint"}, "needs 'path'"),
    ({"kind": "endpoint", "url": ""}, "needs 'url'"),
    ({"kind": "checkpoint", "path": "x", "temperature": -1}, "temperature must be a number >= 0"),
    ({"kind": "endpoint", "url": "http://a", "temperature": "hot"}, "temperature must be a number >= 0"),
])
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=message):
        policy_from_spec(spec, Settings())


@pytest.mark.slow  # imports torch and transformers through webrl.models
def test_endpoint_spec_builds_the_http_policy():
    pytest.importorskip("webrl.models.policy")
    policy = policy_from_spec({"kind": "endpoint", "url": "http://127.0.0.1:1"}, Settings())
    assert type(policy).__name__ == "ActorEndpointPolicy" and isinstance(policy, Policy)
    assert policy.temperature is None  # the actor service's own default
    sampled = policy_from_spec({"kind": "endpoint", "url": "http://127.0.0.1:1", "temperature": 0.7}, Settings())
    assert sampled.temperature == 0.7
