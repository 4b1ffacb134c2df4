"""REST routes of the browser pool (``uvicorn services.browser_pool.app:app``). Routes only; the logic is
in ``sessions.py``, ``episode.py``, ``runs.py`` and ``rollout.py``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, model_validator
from starlette.concurrency import run_in_threadpool

from services.browser_pool.episode import StartUrlRefused, StorageStateRefused
from services.browser_pool.pool import BrowserPool
from services.browser_pool.rollout import check_task_keys
from services.browser_pool.sessions import EpisodeManager, EpisodeNotFound, EvaluationTimedOut, JobView, PoolBusy
from webrl.agent.schemas import Observation, TaskConfig
from webrl.config import Settings, get_settings
from webrl.db import repository
from webrl.db.session import session_scope
from webrl.policies.specs import check_policy_spec
from webrl.serving.factory import create_app, invalid, not_found
from webrl.serving.metrics import attribute_reader, register_value
from webrl.wire.contracts import RolloutRequest


class CreateEpisodeIn(BaseModel):
    """Exactly one of ``task`` (a WebArena config) or ``task_key`` (a stored task)."""

    task: TaskConfig | None = Field(None, description="A WebArena task config (placeholders allowed).")
    task_key: str | None = Field(None, description="Key of a stored task (tasks.key).")

    @model_validator(mode="after")
    def _one_of(self) -> CreateEpisodeIn:
        if (self.task is None) == (self.task_key is None):
            raise ValueError("give exactly one of 'task' or 'task_key'")
        return self


class EpisodeOut(BaseModel):
    episode_id: str
    observation: Observation


class StepIn(BaseModel):
    action: str = Field(max_length=4096, description='WebRL action text, e.g. do(action="Click", element="7").')


class StepOut(BaseModel):
    observation: Observation
    action: str | None = Field(description="The parsed action in canonical form; null if it did not parse.")
    parse_error: str | None
    error: str | None
    done: bool
    answer: str | None


class EvaluateIn(BaseModel):
    answer: str | None = Field(None, description="The agent's answer (exit message), if any.")


class EvaluateOut(BaseModel):
    score: float | None = Field(description="Evaluator score; null when the task has no eval block.")


def _manager(request: Request) -> EpisodeManager:
    return request.app.state.manager


ManagerDep = Annotated[EpisodeManager, Depends(_manager)]


def _task_by_key(settings: Settings, key: str) -> TaskConfig:
    with session_scope(settings) as session:
        rows = repository.tasks_by_keys(session, [key])
        if not rows:
            raise not_found(f"task {key!r}")
        return repository.task_config(rows[0])


def _add_metrics(app: FastAPI) -> None:
    """The pool's counts on ``/metrics``: episodes (REST episodes and embedded rollout jobs) hold a browser each."""
    registry = app.state.metrics_registry
    register_value(registry, "webrl_browser_episodes_in_flight", "Episodes running now (browsers leased)", "gauge",
                   attribute_reader(app.state, "manager.pool.leased"))
    register_value(registry, "webrl_browser_pool_size", "Browsers in the pool", "gauge",
                   attribute_reader(app.state, "manager.pool.size"))
    register_value(registry, "webrl_browser_restarts", "Dead browsers replaced", "counter",
                   attribute_reader(app.state, "manager.pool.restarts"))


def create_app_for_service(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = BrowserPool(settings, settings.browser.pool_size)
        app.state.manager = EpisodeManager(settings, pool)
        warming = asyncio.ensure_future(pool.warm_up())  # browsers and spare contexts before the first request
        yield
        await warming
        await app.state.manager.close()

    app = create_app("browser_pool", settings=settings,
                     description="Chromium episodes for web agents: reset, step, evaluate, rollouts.")
    app.router.lifespan_context = lifespan
    _add_metrics(app)

    @app.post("/v1/episodes", response_model=EpisodeOut, tags=["episodes"])
    async def create_episode(body: CreateEpisodeIn, manager: ManagerDep) -> EpisodeOut:
        task = body.task or await run_in_threadpool(_task_by_key, settings, body.task_key or "")
        try:
            episode = await manager.create(task)
        except PoolBusy as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from None
        except StartUrlRefused as exc:
            raise invalid("task.start_url" if body.task else "task_key", str(exc)) from None
        except StorageStateRefused as exc:
            raise invalid("task.storage_state" if body.task else "task_key", str(exc)) from None
        assert episode.observation is not None
        return EpisodeOut(episode_id=episode.id, observation=episode.observation)

    @app.post("/v1/episodes/{episode_id}/step", response_model=StepOut, tags=["episodes"])
    async def step_episode(episode_id: str, body: StepIn, manager: ManagerDep) -> StepOut:
        try:
            result = await manager.step(episode_id, body.action)
        except EpisodeNotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        return StepOut(observation=result.observation, action=result.action.format() if result.action else None,
                       parse_error=result.parse_error, error=result.error, done=result.done, answer=result.answer)

    @app.post("/v1/episodes/{episode_id}/evaluate", response_model=EvaluateOut, tags=["episodes"])
    async def evaluate_episode(episode_id: str, body: EvaluateIn, manager: ManagerDep) -> EvaluateOut:
        from webrl.evaluation.harness_errors import EvaluationError

        try:
            return EvaluateOut(score=await manager.evaluate(episode_id, body.answer))
        except EpisodeNotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        except EvaluationError as exc:
            raise HTTPException(status_code=422, detail=f"eval: {exc}") from None
        except EvaluationTimedOut as exc:
            raise HTTPException(status_code=504, detail=str(exc)) from None

    @app.delete("/v1/episodes/{episode_id}", tags=["episodes"])
    async def delete_episode(episode_id: str, manager: ManagerDep) -> dict[str, str]:
        try:
            await manager.delete(episode_id)
        except EpisodeNotFound as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from None
        return {"deleted": episode_id}

    @app.post("/v1/rollouts", response_model=JobView, status_code=202, tags=["jobs"])
    async def start_rollout(body: RolloutRequest, manager: ManagerDep) -> JobView:
        check_policy_spec(body.policy, settings)  # InvalidRequest: a 422 naming policy
        await run_in_threadpool(check_task_keys, body, settings)  # UnknownTasksError: a 422 naming task_keys
        return await manager.submit(body)

    @app.get("/v1/jobs/{job_id}", response_model=JobView, tags=["jobs"])
    async def get_job(job_id: str, manager: ManagerDep) -> JobView:
        job = await manager.job(job_id)
        if job is None:
            raise not_found(f"job {job_id!r}")
        return job

    return app


app = create_app_for_service()
