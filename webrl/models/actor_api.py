"""The actor service's ``POST /v1/act`` records, shared by the service and :class:`ActorEndpointPolicy`, and
their conversions from and to the policy interface (:mod:`webrl.agent.policy`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from webrl.actions import Action
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.schemas import Observation, Seed

MAX_ACT_BATCH = 256  # one request carries at most this many observations


class ActItem(BaseModel):
    """One episode's current step."""

    intent: str = Field(min_length=1, description="The task intent.")
    observation: Observation
    history: list[str] = Field(default_factory=list, description="Earlier raw responses of this episode, oldest "
                                                                  "first (their observations are elided).")

    @classmethod
    def of(cls, request: PolicyRequest) -> ActItem:
        """The item of a policy request: its intent, observation and earlier raw responses."""
        return cls(intent=request.intent, observation=request.observation,
                   history=[step.response for step in request.history])


class ActRequest(BaseModel):
    batch: list[ActItem] = Field(min_length=1, max_length=MAX_ACT_BATCH)
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Default: WEBRL_ACTOR_TEMPERATURE.")
    max_new_tokens: int | None = Field(None, ge=1, le=2048, description="Default: WEBRL_ACTOR_MAX_NEW_TOKENS.")
    seed: Seed | None = None


class ActResult(BaseModel):
    response: str = Field(description="The raw generated text.")
    action: Action | None = None
    parse_error: str | None = None
    token_ids: list[int] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    prompt_tokens: int = 0
    version: str = ""

    def policy_response(self) -> PolicyResponse:
        """The result as a policy's response (text, token ids, log-probs, version)."""
        return PolicyResponse(response=self.response, token_ids=self.token_ids, logprobs=self.logprobs,
                              version=self.version)


class ActResponse(BaseModel):
    results: list[ActResult]
    version: str = Field(description="Checkpoint version that produced every result of this batch.")
