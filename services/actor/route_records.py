"""Request and response records of the actor's routes (``/v1/act``'s live in ``webrl.wire.contracts``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from webrl.agent.early_stop import MAX_STEPS
from webrl.agent.schemas import Seed, Trajectory
from webrl.method.hyperparams import MAX_EPISODE_STEPS

MAX_PROMPTS = 64  # prompts per completions call


# POST /v1/logprobs
class LogprobItem(BaseModel):
    prompt: str = Field(min_length=1, description="A rendered prompt (chat template applied).")
    completion: str = Field(description="The response; the end-of-turn token is appended and scored.")


class LogprobsRequest(BaseModel):
    items: list[LogprobItem] = Field(min_length=1, max_length=MAX_PROMPTS)


class LogprobScore(BaseModel):
    sum_logprob: float
    n_tokens: int
    mean_logprob: float
    confidence: float = Field(description="exp(mean log-prob) = 1 / perplexity (the replay filter's score).")
    token_logprobs: list[float]


class LogprobsResponse(BaseModel):
    results: list[LogprobScore]
    version: str


# POST /v1/completions (OpenAI-compatible subset; unknown OpenAI parameters are accepted and ignored)
class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    prompt: str | list[str] = Field(description="One prompt or a list of prompts.")
    max_tokens: int = Field(16, ge=1, le=4096)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    logprobs: int | None = Field(None, ge=0, le=1, description="Only the sampled token's log-prob is returned.")
    n: int = Field(1, ge=1, le=1)
    echo: Literal[False] = False
    seed: Seed | None = None
    return_tokens_as_token_ids: bool = Field(False, description="vLLM's extension: tokens as 'token_id:<id>'.")


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str
    token_ids: list[int] = Field(default_factory=list, description="Generated ids (vLLM's return_token_ids).")


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage
    system_fingerprint: str = Field(description="The serving checkpoint's version.")


# POST /generate (TGI-compatible)
class TgiGenerateParameters(BaseModel):
    model_config = ConfigDict(extra="allow")

    max_new_tokens: int | None = Field(20, ge=1, le=4096)
    do_sample: bool = False
    temperature: float | None = Field(None, gt=0.0, le=2.0)
    seed: Seed | None = None
    details: bool = False
    return_full_text: bool | None = False
    decoder_input_details: bool = False


class TgiGenerateRequest(BaseModel):
    inputs: str = Field(min_length=1)
    parameters: TgiGenerateParameters = Field(default_factory=TgiGenerateParameters)
    stream: Literal[False] = False


class TgiGenerateToken(BaseModel):
    id: int
    text: str
    logprob: float
    special: bool


class TgiGenerateDetails(BaseModel):
    finish_reason: Literal["length", "eos_token", "stop_sequence"]
    generated_tokens: int
    seed: int | None = None
    prefill: list[dict[str, Any]] = Field(default_factory=list)
    tokens: list[TgiGenerateToken]


class TgiGenerateResponse(BaseModel):
    generated_text: str
    details: TgiGenerateDetails | None = None


# POST /v1/agent/run
class AgentRunRequest(BaseModel):
    task_id: str | None = Field(None, description="Key of a stored task (e.g. sandbox/test/12).")
    intent: str | None = Field(None, min_length=1)
    start_url: str | None = Field(None, description="Must be on the browser allow-list.")
    max_steps: int = Field(MAX_STEPS, ge=1, le=MAX_EPISODE_STEPS)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    evaluate: bool = Field(True, description="Score the final state with the task's evaluator when it has one.")


class AgentRunResponse(BaseModel):
    trajectory: Trajectory
    env_score: float | None
    version: str
