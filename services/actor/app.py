"""The actor service's routes. ``uvicorn services.actor.app:app`` serves ``WEBRL_ACTOR__MODEL`` with
``WEBRL_ACTOR__BACKEND``; with ``WEBRL_JOBS__REDIS_URL`` set it hot-reloads actors published on
``webrl:checkpoints``."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request

from services.actor.agent import AgentRunError, PoolRefusedError, PoolUnavailableError, resolve_run, run_agent
from services.actor.engine import ActorEngine, EngineUnavailableError
from services.actor.reload import CheckpointSubscriber
from services.actor.route_records import (
    MAX_PROMPTS,
    AgentRunRequest,
    AgentRunResponse,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    CompletionUsage,
    LogprobScore,
    LogprobsRequest,
    LogprobsResponse,
    TgiGenerateDetails,
    TgiGenerateRequest,
    TgiGenerateResponse,
    TgiGenerateToken,
)
from webrl.config import Settings, get_settings
from webrl.models.backends import Generation
from webrl.serving.factory import create_app, invalid, model_work, within
from webrl.serving.metrics import attribute_reader, register_value
from webrl.serving.paths import requested_model_folder
from webrl.store.checkpoints import CHANNEL
from webrl.wire.contracts import ActRequest, ActResponse

log = logging.getLogger("webrl.actor")
BATCH_ROUTES = ("/v1/act", "/v1/logprobs", "/v1/completions")  # they carry batches of pages or prompts


def get_engine(request: Request) -> ActorEngine:
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        raise HTTPException(status_code=503, detail="the actor model is not loaded yet")
    return engine


EngineDep = Annotated[ActorEngine, Depends(get_engine)]


def _lifespan(settings: Settings, engine: ActorEngine | None, channel: str
              ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.engine = engine or await asyncio.to_thread(ActorEngine.from_settings, settings)
        subscriber = None
        if settings.jobs.redis_url:
            subscriber = CheckpointSubscriber(
                settings.jobs.redis_url, app.state.engine.reload, lambda: app.state.engine.version, channel=channel,
                check_path=lambda path: requested_model_folder(settings, path, "path", configured=settings.actor.model))
            subscriber.start()
        app.state.subscriber = subscriber
        try:
            yield
        finally:
            if subscriber is not None:
                subscriber.stop()
            app.state.engine.close()

    return lifespan


def _add_actor_routes(app: FastAPI) -> None:
    @app.post("/v1/act", response_model=ActResponse, tags=["actor"])
    async def act(body: ActRequest, engine: EngineDep) -> ActResponse:
        """A batch of observations to actions: raw text, parsed action or parse error, ids, log-probs."""
        return await within(engine.settings, engine.act(body), "acting")

    @app.post("/v1/logprobs", response_model=LogprobsResponse, tags=["actor"])
    async def logprobs(body: LogprobsRequest, engine: EngineDep) -> LogprobsResponse:
        """Log-probs of completions after prompts (perplexity filtering)."""
        pairs = [(i.prompt, i.completion) for i in body.items]
        try:
            results, version = await model_work(engine.settings, engine.scoring, lambda: engine.logprobs(pairs),
                                                "log-probs")
        except EngineUnavailableError as exc:
            raise HTTPException(status_code=409, detail=str(exc)) from None
        return LogprobsResponse(results=[LogprobScore(**vars(r)) for r in results], version=version)

    @app.get("/v1/model", tags=["actor"])
    def model(engine: EngineDep, request: Request) -> dict:
        """The serving checkpoint: version, backend, path, size; why the last hot reload failed, if it did."""
        subscriber = request.app.state.subscriber
        return {**engine.describe(), "reload_error": subscriber.error if subscriber else None}

    @app.post("/v1/agent/run", response_model=AgentRunResponse, tags=["agent"],
              responses={503: {"description": "The browser pool service is unreachable or has no free browser"},
                         502: {"description": "The browser pool service refused a call of the run"}})
    async def agent_run(body: AgentRunRequest, engine: EngineDep) -> AgentRunResponse:
        """Run one episode through the browser pool service and return the trajectory and its evaluation."""
        try:
            task = await asyncio.to_thread(resolve_run, body, engine.settings)  # a stored task: a database read
        except AgentRunError as exc:
            raise invalid(exc.field, str(exc)) from None
        try:
            trajectory = await run_agent(task, engine, engine.settings, max_steps=body.max_steps,
                                         temperature=body.temperature, evaluate=body.evaluate)
        except PoolUnavailableError as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from None
        except PoolRefusedError as exc:
            raise HTTPException(status_code=502, detail=str(exc)) from None
        return AgentRunResponse(trajectory=trajectory, env_score=trajectory.env_score,
                                version=trajectory.actor_version)


def _logprobs_block(engine: ActorEngine, g: Generation, as_ids: bool) -> CompletionLogprobs:
    tokens = [f"token_id:{t}" if as_ids else engine.tokenizer.decode([t]) for t in g.token_ids]
    offsets, at = [], 0
    for t in g.token_ids:
        offsets.append(at)
        at += len(engine.tokenizer.decode([t], skip_special_tokens=True))
    top = [{tok: lp} for tok, lp in zip(tokens, g.logprobs, strict=True)]  # the sampled token only
    return CompletionLogprobs(tokens=tokens, token_logprobs=g.logprobs, top_logprobs=top, text_offset=offsets)


def _completion_choices(engine: ActorEngine, body: CompletionRequest, generations: list[Generation]
                        ) -> list[CompletionChoice]:
    return [CompletionChoice(index=i, text=g.text, finish_reason=g.finish_reason, token_ids=g.token_ids,
                             logprobs=_logprobs_block(engine, g, body.return_tokens_as_token_ids)
                             if body.logprobs is not None else None)
            for i, g in enumerate(generations)]


def _add_compat_routes(app: FastAPI) -> None:
    @app.post("/v1/completions", response_model=CompletionResponse, tags=["compat"])
    async def completions(body: CompletionRequest, engine: EngineDep) -> CompletionResponse:
        """OpenAI-compatible completions (vLLM's ``return_tokens_as_token_ids`` honoured)."""
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if not prompts or any(not p for p in prompts):
            raise invalid("prompt", "needs at least one non-empty prompt")
        if len(prompts) > MAX_PROMPTS:
            raise invalid("prompt", f"at most {MAX_PROMPTS} prompts per request, got {len(prompts)}")
        generations, version = await within(
            engine.settings, engine.complete(prompts, body.max_tokens, body.temperature, body.seed), "completion")
        choices = await asyncio.to_thread(_completion_choices, engine, body, generations)
        n_prompt = sum(await asyncio.to_thread(lambda: [engine.prompt_tokens(p) for p in prompts]))
        n_completion = sum(len(g.token_ids) for g in generations)
        return CompletionResponse(id=f"cmpl-{uuid.uuid4().hex}", created=int(time.time()),
                                  model=body.model or version, choices=choices, system_fingerprint=version,
                                  usage=CompletionUsage(prompt_tokens=n_prompt, completion_tokens=n_completion,
                                                        total_tokens=n_prompt + n_completion))

    @app.get("/v1/models", tags=["compat"])
    def models(engine: EngineDep) -> dict:
        """OpenAI-compatible model list: the served checkpoint, its version as ``id`` and, as vLLM reports it, the
        folder it was loaded from as ``root`` (what a chained actor's openai backend reads its version from)."""
        return {"object": "list", "data": [{"id": engine.version, "object": "model", "created": 0,
                                            "owned_by": "webrl", "root": engine.path or None}]}

    @app.get("/info", tags=["compat"])
    def info(engine: EngineDep) -> dict:
        """TGI-compatible ``/info``: ``model_id`` is the folder served (what the tgi backend reads its version
        from)."""
        return {"model_id": engine.path or engine.version, "router": "webrl-actor", "version": engine.version}

    @app.post("/generate", response_model=TgiGenerateResponse, response_model_exclude_none=True, tags=["compat"])
    async def generate(body: TgiGenerateRequest, engine: EngineDep) -> TgiGenerateResponse:
        """TGI-compatible ``/generate`` (``details`` gives each token's id and log-prob)."""
        params = body.parameters
        temperature = (params.temperature or 1.0) if params.do_sample else 0.0
        generations, _ = await within(engine.settings, engine.complete(
            [body.inputs], params.max_new_tokens or 20, temperature, params.seed), "generation")
        g = generations[0]
        text = body.inputs + g.text if params.return_full_text else g.text
        if not params.details:
            return TgiGenerateResponse(generated_text=text)
        special = set(engine.tokenizer.all_special_ids)
        tokens = [TgiGenerateToken(id=t, text=engine.tokenizer.decode([t]), logprob=lp, special=t in special)
                  for t, lp in zip(g.token_ids, g.logprobs, strict=True)]
        finish = "eos_token" if g.finish_reason == "stop" else "length"
        return TgiGenerateResponse(generated_text=text, details=TgiGenerateDetails(
            finish_reason=finish, generated_tokens=len(tokens), seed=params.seed, tokens=tokens))


def _add_metrics(app: FastAPI) -> None:
    """The engine's counts on ``/metrics`` (no samples before the lifespan has loaded the model)."""
    registry = app.state.metrics_registry
    register_value(registry, "webrl_actor_tokens_generated", "Tokens the actor generated (every route, every "
                   "checkpoint served)", "counter", attribute_reader(app.state, "engine.tokens_generated"))
    register_value(registry, "webrl_actor_requests_in_flight", "Generation requests running now", "gauge",
                   attribute_reader(app.state, "engine.in_flight"))


def create_actor_app(settings: Settings | None = None, *, engine: ActorEngine | None = None,
                     channel: str = CHANNEL) -> FastAPI:
    """The actor app. ``engine`` (tests, embedded use) skips loading from settings; ``channel`` is the
    Redis channel of checkpoint events."""
    settings = settings or get_settings()
    app = create_app("actor", settings=settings, description="Policy inference, agent runs, hot reload.",
                     batch_routes=BATCH_ROUTES)
    app.router.lifespan_context = _lifespan(settings, engine, channel)
    _add_metrics(app)
    _add_actor_routes(app)
    _add_compat_routes(app)
    return app


app = create_actor_app()
