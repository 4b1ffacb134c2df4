"""The policy interface between the episode loop and whatever picks actions.

The browser pool hands a policy a *batch* of requests (one per live episode), so an actor can batch its
forward passes; oracle solvers, the local actor and remote actor endpoints all implement it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from webrl.allow_list import endpoint_problem
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


def check_policy_spec(spec: dict, settings: Settings) -> None:
    """Raise ValueError naming the problem unless :func:`policy_from_spec` can build ``spec``: an unknown
    kind, a missing or unknown key, a bad temperature, or an endpoint url that is not configured
    (``Settings.endpoint_allow_list``: a request may not send the browser pool to any server it likes)."""
    if not isinstance(spec, dict) or "kind" not in spec:
        raise ValueError(f"policy spec must be an object with a 'kind' (one of {sorted(POLICY_SPEC_KEYS)})")
    kind = spec["kind"]
    if kind not in POLICY_SPEC_KEYS:
        raise ValueError(f"unknown policy kind {kind!r}; expected one of {sorted(POLICY_SPEC_KEYS)}")
    extra = sorted(set(spec) - POLICY_SPEC_KEYS[kind] - {"kind"})
    if extra:
        raise ValueError(f"policy kind {kind!r} does not take {', '.join(extra)}")
    if kind == "oracle":
        return
    key = "path" if kind == "checkpoint" else "url"
    if not spec.get(key):
        raise ValueError(f"policy kind {kind!r} needs {key!r}")
    temperature = spec.get("temperature")
    if temperature is not None and (not isinstance(temperature, int | float) or temperature < 0):
        raise ValueError(f"policy temperature must be a number >= 0, got {temperature!r}")
    if kind == "endpoint":
        problem = endpoint_problem(str(spec["url"]), settings.endpoint_allow_list())
        if problem:
            raise ValueError(f"policy url: {problem}")


def policy_from_spec(spec: dict, settings: Settings) -> Policy:
    """Build a policy from a JSON spec (what rollout jobs carry):

    - ``{"kind": "oracle", "corrupt": 0.0, "seed": 0}``: the sandbox's scripted solvers
      (``corrupt`` = probability a step's action is replaced by a random valid one).
    - ``{"kind": "checkpoint", "path": "<HF folder>"}``: a local model.
    - ``{"kind": "endpoint", "url": "http://actor:8102"}``: an actor service's ``POST /v1/act`` (a
      configured endpoint only).

    Both model kinds take an optional ``"temperature"`` (default ``settings.actor_temperature``, greedy): WebRL
    samples its training rollouts and evaluates greedily.

    Imports are lazy: the browser pool does not load torch to run the oracle. Raises ValueError naming the
    problem (:func:`check_policy_spec`).
    """
    check_policy_spec(spec, settings)
    kind, temperature = spec["kind"], spec.get("temperature")
    if kind == "oracle":
        from webrl.sandbox.oracles import OraclePolicy

        return OraclePolicy(corrupt=float(spec.get("corrupt", 0.0)), seed=int(spec.get("seed", 0)))
    if kind == "checkpoint":
        from webrl.models.policy import LocalModelPolicy

        return LocalModelPolicy(spec["path"], settings, temperature=temperature)
    from webrl.models.policy import ActorEndpointPolicy

    return ActorEndpointPolicy(spec["url"], settings, temperature=temperature)
