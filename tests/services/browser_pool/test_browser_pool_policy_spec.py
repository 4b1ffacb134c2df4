"""policy_from_spec: the rollout job's policy specs (a union on ``kind``), with errors naming the bad field."""

from __future__ import annotations

import pytest

from webrl.agent.policy import Policy
from webrl.config import Settings
from webrl.policies.specs import check_policy_spec, policy_from_spec
from webrl.wire.contracts import CheckpointSpec, EndpointSpec, InvalidRequest


def test_oracle_spec():
    policy = policy_from_spec({"kind": "oracle", "corrupt": 0.25, "seed": 3}, Settings())
    assert isinstance(policy, Policy) and type(policy).__name__ == "OraclePolicy"
    assert policy.corrupt == 0.25 and policy.seed == 3


@pytest.mark.parametrize(("spec", "message"), [
    ({}, "Unable to extract tag using discriminator 'kind'"),
    ({"kind": "magic"}, "does not match any of the expected tags: 'oracle', 'checkpoint', 'endpoint'"),
    ({"kind": "oracle", "path": "x"}, r"oracle\.path\n  Extra inputs are not permitted"),
    ({"kind": "checkpoint"}, r"checkpoint\.path\n  Field required"),
    ({"kind": "endpoint", "url": ""}, r"endpoint\.url\n  String should have at least 1 character"),
    ({"kind": "checkpoint", "path": "x", "temperature": -1}, r"checkpoint\.temperature\n  Input should be greater"),
    ({"kind": "endpoint", "url": "http://a", "temperature": "hot"}, r"endpoint\.temperature\n  Input should be a "),
    ({"kind": "oracle", "corrupt": 1.5}, r"oracle\.corrupt\n  Input should be less than or equal to 1"),
])
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=message):
        policy_from_spec(spec, Settings())


def test_endpoint_urls_must_be_configured():
    """A request may not send the pool to any server: only the configured actor or allowed endpoints."""
    settings = Settings(actor={"url": "http://actor:8102"}, security={"allowed_endpoints": ["http://other:9000/v1"]},
                        _env_file=None)
    for url in ("http://actor:8102", "http://ACTOR:8102/", "http://other:9000"):
        check_policy_spec(EndpointSpec(url=url), settings)
    for url in ("http://actor:8103", "http://127.0.0.1:1", "https://actor:8102", "file:///etc/passwd"):
        with pytest.raises(InvalidRequest, match="policy: url: ") as refused:
            check_policy_spec(EndpointSpec(url=url), settings)
        assert refused.value.field == "policy"
        with pytest.raises(InvalidRequest, match=r"not a configured endpoint|not an http"):  # the Celery path too
            policy_from_spec({"kind": "endpoint", "url": url}, settings)


@pytest.mark.slow  # imports torch and transformers through webrl.models
def test_endpoint_spec_builds_the_http_policy():
    pytest.importorskip("webrl.models.model_policies")
    settings = Settings(actor={"url": "http://127.0.0.1:1"}, security={"api_key": "the-key", "allowed_endpoints": ["http://127.0.0.1:2"]})
    policy = policy_from_spec({"kind": "endpoint", "url": "http://127.0.0.1:1"}, settings)
    assert type(policy).__name__ == "ActorEndpointPolicy" and isinstance(policy, Policy)
    assert policy.temperature is None  # the actor service's own default
    assert policy._headers == {"Authorization": "Bearer the-key"}  # the configured actor gets the key
    sampled = policy_from_spec({"kind": "endpoint", "url": "http://127.0.0.1:2", "temperature": 0.7}, settings)
    assert sampled.temperature == 0.7 and sampled._headers == {}  # another endpoint never does
    default = policy_from_spec({"kind": "endpoint"}, settings)  # what `webrl train` sends in the distributed mode
    assert default.url == "http://127.0.0.1:1/v1/act" and default._headers == {"Authorization": "Bearer the-key"}


def test_checkpoint_paths_must_be_model_folders_a_request_may_name(tmp_path):
    """A checkpoint policy loads (and so runs the code of) its folder: only the store, the shipped models,
    WEBRL_SECURITY__MODEL_DIRS or the configured actor; /etc and an absent folder get the same refusal."""
    from webrl.serving.paths import SHIPPED_MODELS

    settings = Settings(home=tmp_path / "home", security={"model_dirs": []}, _env_file=None)
    for path in ("/etc", "/root", "/nonexistent-webrl", str(tmp_path)):
        with pytest.raises(InvalidRequest, match=r"^policy\.path: .*outside the artifacts store") as refused:
            check_policy_spec(CheckpointSpec(path=path), settings)
        assert refused.value.field == "policy.path"
        with pytest.raises(InvalidRequest, match="outside the artifacts store"):  # the Celery path too
            policy_from_spec({"kind": "checkpoint", "path": path}, settings)
    check_policy_spec(CheckpointSpec(path=str(SHIPPED_MODELS / "actor-sft")), settings)
    check_policy_spec(CheckpointSpec(path=str(tmp_path)), settings.replace(actor={"model": str(tmp_path)}))


@pytest.mark.parametrize(("dtype", "loaded"), [(None, "float32"), ("bfloat16", "bfloat16"), ("float32", "float32"),
                                               ("auto", "native")])
def test_a_checkpoint_spec_names_the_dtype_its_folder_loads_in(tmp_path, dtype, loaded):
    """Sampled training rollouts may load the actor in bf16 (``rollout.sampling_dtype``) while evaluation keeps the
    settings' fp32: the spec's dtype wins over WEBRL_MODELS__DTYPE for that rollout alone; ``auto`` is bf16 where the
    hardware computes it natively."""
    import torch

    from webrl.models.loading import native_bf16
    from webrl.serving.paths import SHIPPED_MODELS

    settings = Settings(home=tmp_path / "home", _env_file=None)
    policy = policy_from_spec({"kind": "checkpoint", "path": str(SHIPPED_MODELS / "actor-sft"), "dtype": dtype},
                              settings)
    if loaded == "native":
        loaded = "bfloat16" if native_bf16() else "float32"
    assert policy.backend.model.dtype == getattr(torch, loaded)
    assert settings.models.dtype == "float32"  # the settings themselves are left as they were
