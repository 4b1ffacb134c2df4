"""The policy interface between the episode loop and whatever picks actions.

The browser pool hands a policy a *batch* of requests (one per live episode), so an actor can batch its
forward passes; oracle solvers, the local actor and remote actor endpoints all implement it. Policies are
built from a spec by :func:`webrl.policies.specs.policy_from_spec`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from webrl.agent.schemas import Observation, Step, TaskConfig


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


#: One episode's view of a policy: a request in, its response out (the episode loop calls it once a step).
Decide = Callable[[PolicyRequest], Awaitable[PolicyResponse]]
