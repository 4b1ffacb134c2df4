"""taskgen REST: ``POST /v1/tasks/generate`` and ``POST /v1/tasks/filter``."""

from __future__ import annotations

from typing import Literal

from fastapi import HTTPException
from pydantic import BaseModel, Field, model_validator

from services.taskgen.curriculum import (
    VALUE_HIGH,
    VALUE_LOW,
    EndpointRefused,
    filter_by_value,
    generate_grounded,
    generate_llm,
)
from webrl.config import get_settings
from webrl.service import create_app, invalid


class GenerateRequest(BaseModel):
    phase: int = Field(ge=1, description="Phase the new tasks belong to.")
    parent_keys: list[str] = Field(min_length=1, max_length=5000, description="Keys of the failed tasks.")
    n: int = Field(ge=1, le=10000, description="How many tasks to generate at most.")
    generator: Literal["grounded", "llm"] = "grounded"
    seed: int = 0
    endpoint: str | None = Field(None, description="OpenAI-compatible base URL (llm generator).")
    model: str | None = Field(None, description="Model name at the endpoint (llm generator).")
    mode: Literal["chat", "completions"] = "chat"
    feasibility: bool = True

    @model_validator(mode="after")
    def _llm_needs_endpoint(self) -> GenerateRequest:
        if self.generator == "llm" and not (self.endpoint and self.model):
            raise ValueError("the llm generator needs endpoint and model")
        return self


class GenerateResponse(BaseModel):
    task_keys: list[str]
    rejected: list[dict[str, str]] = Field(default_factory=list)
    duplicates: int = 0


class FilterRequest(BaseModel):
    task_keys: list[str] = Field(min_length=1, max_length=10000)
    values: dict[str, float] = Field(description="V(start state) per task key, in [0, 1].")
    critic_version: str = Field(min_length=1, max_length=80)
    low: float = Field(VALUE_LOW, ge=0.0, le=1.0)
    high: float = Field(VALUE_HIGH, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _check(self) -> FilterRequest:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        missing = [k for k in self.task_keys if k not in self.values]
        if missing:
            raise ValueError(f"values lacks task keys {missing[:5]}")
        if any(not 0.0 <= v <= 1.0 for v in self.values.values()):
            raise ValueError("every value must lie in [0, 1]")
        return self


class FilterResponse(BaseModel):
    kept: list[str]


app = create_app("taskgen", description="Curriculum task generation and filtering (WebRL section 3.2).")


@app.post("/v1/tasks/generate", response_model=GenerateResponse, tags=["tasks"])
def generate(body: GenerateRequest) -> GenerateResponse:
    settings = get_settings()
    try:
        if body.generator == "llm":
            assert body.endpoint and body.model
            result = generate_llm(settings, body.phase, body.parent_keys, body.n, body.seed,
                                  endpoint=body.endpoint, model=body.model, mode=body.mode,
                                  feasibility=body.feasibility)
        else:
            result = generate_grounded(settings, body.phase, body.parent_keys, body.n, body.seed)
    except KeyError as exc:
        raise HTTPException(status_code=422, detail=f"parent_keys: {exc.args[0]}") from None
    except EndpointRefused as exc:
        raise invalid("endpoint", str(exc)) from None
    return GenerateResponse(task_keys=result.task_keys, duplicates=result.duplicates,
                            rejected=[{"text": r.text, "reason": r.reason} for r in result.rejected])


@app.post("/v1/tasks/filter", response_model=FilterResponse, tags=["tasks"])
def filter_tasks(body: FilterRequest) -> FilterResponse:
    try:
        kept = filter_by_value(get_settings(), body.task_keys, body.values, critic_version=body.critic_version,
                               low=body.low, high=body.high)
    except KeyError as exc:
        raise HTTPException(status_code=422, detail=f"task_keys: {exc.args[0]}") from None
    return FilterResponse(kept=kept)
