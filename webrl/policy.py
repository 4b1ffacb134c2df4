"""Policies from their JSON spec (what rollout jobs carry): the sandbox's oracle, a local checkpoint, an actor
service. The interface they implement is :class:`webrl.agent.policy.Policy`.
"""

from __future__ import annotations

from webrl.agent.policy import Policy
from webrl.config import Settings

#: Policy spec kinds :func:`policy_from_spec` builds, with the keys each one takes.
POLICY_SPEC_KEYS: dict[str, set[str]] = {
    "oracle": {"corrupt", "seed"},
    "checkpoint": {"path", "temperature"},
    "endpoint": {"url", "temperature"},
}


def policy_from_spec(spec: dict, settings: Settings) -> Policy:
    """Build a policy from a JSON spec (what rollout jobs carry):

    - ``{"kind": "oracle", "corrupt": 0.0, "seed": 0}``: the sandbox's scripted solvers
      (``corrupt`` = probability a step's action is replaced by a random valid one).
    - ``{"kind": "checkpoint", "path": "<HF folder>"}``: a local model.
    - ``{"kind": "endpoint", "url": "http://actor:8102"}``: an actor service's ``POST /v1/act``.

    Both model kinds take an optional ``"temperature"`` (default ``settings.actor_temperature``, greedy): WebRL
    samples its training rollouts and evaluates greedily.

    Imports are lazy: the browser pool does not load torch to run the oracle. Raises ValueError naming the
    problem for an unknown kind, a missing key or an unknown key.
    """
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ValueError(f"policy spec must be an object with a 'kind' (one of {sorted(POLICY_SPEC_KEYS)})")
    kind = spec["kind"]
    if kind not in POLICY_SPEC_KEYS:
        raise ValueError(f"unknown policy kind {kind!r}; expected one of {sorted(POLICY_SPEC_KEYS)}")
    extra = sorted(set(spec) - POLICY_SPEC_KEYS[kind] - {"kind"})
    if extra:
        raise ValueError(f"policy kind {kind!r} does not take {', '.join(extra)}")
    if kind == "oracle":
        from webrl.sandbox.oracles import OraclePolicy

        return OraclePolicy(corrupt=float(spec.get("corrupt", 0.0)), seed=int(spec.get("seed", 0)))
    key = "path" if kind == "checkpoint" else "url"
    if not spec.get(key):
        raise ValueError(f"policy kind {kind!r} needs {key!r}")
    temperature = spec.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or temperature < 0):
        raise ValueError(f"policy temperature must be a number >= 0, got {temperature!r}")
    if kind == "checkpoint":
        from webrl.models.policy import LocalModelPolicy

        return LocalModelPolicy(spec["path"], settings, temperature=temperature)
    from webrl.models.policy import ActorEndpointPolicy

    return ActorEndpointPolicy(spec["url"], settings, temperature=temperature)
