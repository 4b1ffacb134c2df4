"""Policies from their JSON spec (what rollout jobs carry): the sandbox's oracle, a local checkpoint, an actor
service. The interface they implement is :class:`webrl.agent.policy.Policy`.
"""

from __future__ import annotations

from typing import Any

from webrl.agent.policy import Policy
from webrl.config import Settings
from webrl.contracts import POLICY_SPEC, CheckpointSpec, OracleSpec, PolicySpec


def policy_from_spec(spec: PolicySpec | dict[str, Any], settings: Settings) -> Policy:
    """Build the policy a rollout job's spec names (:data:`webrl.contracts.PolicySpec`):

    - :class:`~webrl.contracts.OracleSpec`: the sandbox's scripted solvers;
    - :class:`~webrl.contracts.CheckpointSpec`: a local model folder;
    - :class:`~webrl.contracts.EndpointSpec`: an actor service's ``POST /v1/act``.

    Both model kinds take an optional ``temperature`` (default ``settings.actor_temperature``, greedy): WebRL
    samples its training rollouts and evaluates greedily. A dict is validated first (a pydantic
    ValidationError names the bad field). Imports are lazy: the browser pool does not load torch to run the oracle.
    """
    spec = POLICY_SPEC.validate_python(spec) if isinstance(spec, dict) else spec
    if isinstance(spec, OracleSpec):
        from webrl.sandbox.oracles import OraclePolicy

        return OraclePolicy(corrupt=spec.corrupt, seed=spec.seed)
    if isinstance(spec, CheckpointSpec):
        from webrl.models.policy import LocalModelPolicy

        return LocalModelPolicy(spec.path, settings, temperature=spec.temperature)
    from webrl.models.policy import ActorEndpointPolicy

    return ActorEndpointPolicy(spec.url, settings, temperature=spec.temperature)
