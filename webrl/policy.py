"""The policy interface between the episode loop and whatever picks actions.

The browser pool hands a policy a *batch* of requests (one per live episode), so an actor can batch its
forward passes; oracle solvers, the local actor and remote actor endpoints all implement it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from webrl.config import Settings
from webrl.contracts import POLICY_SPEC, CheckpointSpec, OracleSpec, PolicySpec
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
