"""The policy interface between the episode loop and whatever picks actions.

The browser pool hands a policy a *batch* of requests (one per live episode), so an actor can batch its
forward passes; oracle solvers, the local actor and remote actor endpoints all implement it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from webrl.config import Settings
from webrl.schemas import Observation, Step, TaskConfig


class PolicyRequest(BaseModel):
    """What a policy sees at one step of one episode."""

    task: TaskConfig = Field(description="The task config (resolved URLs); oracles read its instantiation.")
    intent: str
    observation: Observation
    history: list[Step] = Field(default_factory=list, description="Earlier steps of this episode, in order.")


class PolicyResponse(BaseModel):
    """What a policy answers: the raw text (parsed by the episode loop) and, for models, the exact
    generated token ids and their log-probs."""

    response: str
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    version: str = Field("", description="Checkpoint version that produced the response.")


@runtime_checkable
class Policy(Protocol):
    """Anything that maps a batch of requests to one response each, in order."""

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]: ...


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
