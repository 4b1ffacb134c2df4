"""policy_from_spec: the rollout job's policy specs, with clear errors for bad ones."""

from __future__ import annotations

import pytest

from webrl.config import Settings
from webrl.policy import Policy, check_policy_spec, policy_from_spec


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


def test_endpoint_urls_must_be_configured():
    """A request may not send the pool to any server: only the configured actor or allowed endpoints."""
    settings = Settings(actor_url="http://actor:8102", allowed_endpoints=["http://other:9000/v1"], _env_file=None)
    for url in ("http://actor:8102", "http://ACTOR:8102/", "http://other:9000"):
        check_policy_spec({"kind": "endpoint", "url": url}, settings)
    for url in ("http://actor:8103", "http://127.0.0.1:1", "https://actor:8102", "file:///etc/passwd"):
        with pytest.raises(ValueError, match="policy url: "):
            check_policy_spec({"kind": "endpoint", "url": url}, settings)


@pytest.mark.slow  # imports torch and transformers through webrl.models
def test_endpoint_spec_builds_the_http_policy():
    pytest.importorskip("webrl.models.policy")
    settings = Settings(actor_url="http://127.0.0.1:1", api_key="the-key", allowed_endpoints=["http://127.0.0.1:2"])
    policy = policy_from_spec({"kind": "endpoint", "url": "http://127.0.0.1:1"}, settings)
    assert type(policy).__name__ == "ActorEndpointPolicy" and isinstance(policy, Policy)
    assert policy.temperature is None  # the actor service's own default
    assert policy._headers == {"Authorization": "Bearer the-key"}  # the configured actor gets the key
    sampled = policy_from_spec({"kind": "endpoint", "url": "http://127.0.0.1:2", "temperature": 0.7}, settings)
    assert sampled.temperature == 0.7 and sampled._headers == {}  # another endpoint never does
