"""One typed function per Celery task: pass a request model, get the result model back.

Each wraps :func:`webrl.wire.queue.dispatch`, so it runs the task eagerly in the embedded mode and on its service's
worker in the distributed mode; the wire carries the models' JSON. The tasks are ``<service>.<verb>``.
"""

from __future__ import annotations

from typing import TypeVar

from webrl.wire.contracts import (
    ActJob,
    ActResponse,
    Contract,
    FilterRequest,
    FilterResult,
    GenerateRequest,
    GenerateResult,
    ObserveRequest,
    ObserveResult,
    OrmHeadJob,
    PageCheckRequest,
    PageCheckResult,
    PhaseJob,
    PhaseResult,
    RolloutRequest,
    RolloutResult,
    ScoreRequest,
    ScoreResult,
    SftJob,
    SftResult,
    StartValueRequest,
    StartValueResult,
    ValueRequest,
    ValueResult,
)
from webrl.wire.queue import dispatch

R = TypeVar("R", bound=Contract)


def call(task: str, request: Contract, result: type[R], *, timeout: float | None = None) -> R:
    """Run the Celery task ``task`` on ``request``'s JSON and read its JSON answer as ``result``."""
    return result.model_validate(dispatch(task, request.model_dump(mode="json"), timeout=timeout))


def actor_act(job: ActJob, *, timeout: float | None = None) -> ActResponse:
    return call("actor.act", job, ActResponse, timeout=timeout)


def rollout_run(request: RolloutRequest, *, timeout: float | None = None) -> RolloutResult:
    return call("rollout.run", request, RolloutResult, timeout=timeout)


def rollout_observe(request: ObserveRequest, *, timeout: float | None = None) -> ObserveResult:
    return call("rollout.observe", request, ObserveResult, timeout=timeout)


def rollout_check_pages(request: PageCheckRequest, *, timeout: float | None = None) -> PageCheckResult:
    return call("rollout.check_pages", request, PageCheckResult, timeout=timeout)


def critic_value(request: ValueRequest, *, timeout: float | None = None) -> ValueResult:
    return call("critic.value", request, ValueResult, timeout=timeout)


def orm_score(request: ScoreRequest, *, timeout: float | None = None) -> ScoreResult:
    return call("orm.score", request, ScoreResult, timeout=timeout)


def orm_start_value(request: StartValueRequest, *, timeout: float | None = None) -> StartValueResult:
    return call("orm.start_value", request, StartValueResult, timeout=timeout)


def taskgen_generate(request: GenerateRequest, *, timeout: float | None = None) -> GenerateResult:
    return call("taskgen.generate", request, GenerateResult, timeout=timeout)


def taskgen_filter(request: FilterRequest, *, timeout: float | None = None) -> FilterResult:
    return call("taskgen.filter", request, FilterResult, timeout=timeout)


def train_phase(job: PhaseJob, *, timeout: float | None = None) -> PhaseResult:
    return call("train.phase", job, PhaseResult, timeout=timeout)


def train_sft(job: SftJob, *, timeout: float | None = None) -> SftResult:
    return call("train.sft", job, SftResult, timeout=timeout)


def train_orm_head(job: OrmHeadJob, *, timeout: float | None = None) -> SftResult:
    return call("train.orm_head", job, SftResult, timeout=timeout)
