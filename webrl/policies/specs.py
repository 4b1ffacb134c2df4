"""Policies from their JSON spec (what rollout jobs carry): the sandbox's oracle, a local checkpoint, an actor
service. The interface they implement is :class:`webrl.agent.policy.Policy`.
"""

from __future__ import annotations

from typing import Any

from webrl.agent.policy import Policy
from webrl.config import Settings
from webrl.safety.allow_list import endpoint_problem
from webrl.serving.paths import requested_model_folder
from webrl.wire.contracts import POLICY_SPEC, CheckpointSpec, EndpointSpec, InvalidRequest, OracleSpec, PolicySpec


def check_policy_spec(spec: PolicySpec, settings: Settings) -> None:
    """Raise :class:`~webrl.wire.contracts.InvalidRequest` naming ``policy`` unless ``spec`` may be served here: an
    endpoint url must be a configured one (``Settings.endpoint_allow_list``: a request may not send the browser
    pool to any server it likes; no url means ``settings.actor.url``), and a checkpoint path a model folder a
    request may name that holds a model (:func:`~webrl.serving.paths.requested_model_folder`, or the configured
    ``actor.model``: the worker loads it, running its pickles and code), so a folder that holds none is refused
    before the rollout, not inside transformers. The shape of the spec is the contract's business (pydantic)."""
    if isinstance(spec, CheckpointSpec):
        requested_model_folder(settings, spec.path, "policy.path", configured=settings.actor.model)
    if isinstance(spec, EndpointSpec) and spec.url is not None:
        problem = endpoint_problem(spec.url, settings.endpoint_allow_list())
        if problem:
            raise InvalidRequest("policy", f"url: {problem}")


def policy_from_spec(spec: PolicySpec | dict[str, Any], settings: Settings) -> Policy:
    """Build the policy a rollout job's spec names (:data:`webrl.wire.contracts.PolicySpec`):

    - :class:`~webrl.wire.contracts.OracleSpec`: the sandbox's scripted solvers;
    - :class:`~webrl.wire.contracts.CheckpointSpec`: a local model folder;
    - :class:`~webrl.wire.contracts.EndpointSpec`: an actor service's ``POST /v1/act`` (a configured endpoint only,
      :func:`check_policy_spec`; without a url, ``settings.actor.url``).

    Both model kinds take an optional ``temperature`` (default ``settings.actor.temperature``, greedy): WebRL
    samples its training rollouts and evaluates greedily. A dict is validated first (a pydantic
    ValidationError names the bad field). Imports are lazy: the browser pool does not load torch to run the oracle.
    """
    spec = POLICY_SPEC.validate_python(spec) if isinstance(spec, dict) else spec
    check_policy_spec(spec, settings)
    if isinstance(spec, OracleSpec):
        from webrl.sandbox.oracles import OraclePolicy

        return OraclePolicy(corrupt=spec.corrupt, seed=spec.seed)
    if isinstance(spec, CheckpointSpec):
        from webrl.models.loading import with_dtype
        from webrl.models.model_policies import LocalModelPolicy

        loading = with_dtype(settings, spec.dtype) if spec.dtype is not None else settings
        return LocalModelPolicy(spec.path, loading, temperature=spec.temperature, seed=spec.sampling_seed)
    from webrl.models.model_policies import ActorEndpointPolicy

    return ActorEndpointPolicy(spec.url or settings.actor.url, settings, temperature=spec.temperature,
                               version=spec.version)


def close_policy(policy: Policy) -> None:
    """Release what a policy holds (a local checkpoint's lease on its shared backend); a policy that holds nothing
    has no ``close``."""
    close = getattr(policy, "close", None)
    if close is not None:
        close()
