"""Agent runs: one episode of the served actor through the browser pool service (over HTTP).

The actor service owns no browser: the shared episode loop (:func:`webrl.agent.episode_loop.run_episode`) drives a
:class:`RemoteEpisode`, which opens an episode on the browser pool (``POST /v1/episodes``), sends each action
text to the episode's ``step`` route, and at the end asks the pool to evaluate and close the episode; the
actions come from this service's own engine (``ActorEngine.act``).
"""

from __future__ import annotations

import uuid

from webrl.agent.actions import parse_action
from webrl.agent.early_stop import MAX_STEPS
from webrl.agent.environment import StepResult
from webrl.agent.episode_loop import run_episode
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.agent.schemas import Observation, TaskConfig, Trajectory, resolve_placeholders
from webrl.config import SITE_PLACEHOLDERS, Settings
from webrl.safety.allow_list import start_url_problem
from webrl.wire.contracts import ActItem, ActRequest


class AgentRunError(ValueError):
    """A run request that cannot be served; ``field`` names the request field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_allowed(url: str, settings: Settings, field: str = "start_url") -> None:
    """Raise :class:`AgentRunError` unless every `` |AND| `` part of ``url`` is http(s) on the allow-list."""
    allowed = settings.host_allow_list()
    for part in url.split(" |AND| "):
        problem = start_url_problem(part.strip(), allowed)
        if problem:
            raise AgentRunError(field, problem)


def _site_of(url: str, settings: Settings) -> str:
    for site, base in settings.site_urls().items():
        if url.startswith(base):
            return site
    return "unknown"


def _stored_task(key: str, settings: Settings) -> TaskConfig:
    from webrl.db import repository
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        rows = repository.tasks_by_keys(session, [key])
        if not rows:
            raise AgentRunError("task_id", f"no stored task with key {key!r}")
        return repository.task_config(rows[0])


def resolve_run(body, settings: Settings) -> TaskConfig:  # body: services.actor.route_records.AgentRunRequest
    """The task of an agent-run request: a stored task by key, or an ad-hoc intent + start_url."""
    if body.task_id is not None:
        if body.intent is not None or body.start_url is not None:
            raise AgentRunError("task_id", "give either task_id or intent + start_url, not both")
        task = _stored_task(body.task_id, settings).resolved(settings)
    else:
        if not body.intent:
            raise AgentRunError("intent", "needs an intent (or a task_id)")
        if not body.start_url:
            raise AgentRunError("start_url", "needs a start_url (or a task_id)")
        url = resolve_placeholders(body.start_url, settings)
        placeholders = [s for s, token in SITE_PLACEHOLDERS.items() if token in body.start_url]
        task = TaskConfig(task_id=f"adhoc-{uuid.uuid4().hex[:12]}", sites=placeholders or [_site_of(url, settings)],
                          intent=body.intent, start_url=url)
    check_allowed(task.start_url, settings)
    return task


# The episode on the browser pool -----------------------------------------------------------------------------
POOL_TIMEOUT_S = 120.0  # one browser pool call (opening an episode logs in and loads the start page)


class PoolUnavailableError(RuntimeError):
    """The browser pool service could not be reached, or had no browser to give (the run never started or
    could not finish); the actor answers 503 with this message."""


class PoolRefusedError(RuntimeError):
    """The browser pool service answered a call with an error (an episode it no longer holds, a task it refuses);
    the actor answers 502 with the pool's status and message."""

    def __init__(self, path: str, status: int, detail: str) -> None:
        super().__init__(f"browser pool refused {path}: {status} {detail}")
        self.status, self.detail = status, detail


class RemoteEpisode:
    """An episode on the browser pool service (its ``/v1/episodes`` routes), as the episode loop's
    :class:`webrl.agent.environment.Environment`. The pool's errors are raised: :class:`PoolUnavailableError`
    when it cannot be reached or has no browser, :class:`PoolRefusedError` for a refused request; an evaluation the
    pool cannot run or finish (422, 504) is an :class:`~webrl.evaluation.harness_errors.EvaluationError`, so the
    episode is kept unscored, as on the pool's own browsers. A step that ends the episode on the pool (a dead
    browser, a step over its time limit) comes back ``done``."""

    def __init__(self, task: TaskConfig, settings: Settings) -> None:
        import httpx

        self.task = task
        headers = {"Authorization": f"Bearer {settings.security.api_key}"} if settings.security.api_key else {}
        self.http = httpx.AsyncClient(base_url=settings.browser.pool_url, timeout=POOL_TIMEOUT_S, headers=headers)
        self.id: str | None = None

    async def _post(self, path: str, body: dict) -> dict:
        import httpx

        try:
            reply = await self.http.post(path, json=body)
        except httpx.TransportError as exc:
            raise PoolUnavailableError(f"browser pool at {self.http.base_url} unreachable ({path}): "
                                       f"{exc or type(exc).__name__}") from exc
        if reply.status_code == 503:
            raise PoolUnavailableError(f"browser pool at {self.http.base_url} busy: {reply.text[:200]}")
        if reply.is_error:
            raise PoolRefusedError(path, reply.status_code, _detail(reply))
        return reply.json()

    async def reset(self) -> Observation:
        body = await self._post("/v1/episodes", {"task": self.task.to_json()})
        self.id = str(body["episode_id"])
        return Observation.model_validate(body["observation"])

    async def step(self, text: str) -> StepResult:
        outcome = await self._post(f"/v1/episodes/{self.id}/step", {"action": text})
        action = parse_action(outcome["action"]) if outcome.get("action") else None  # canonical text
        return StepResult(observation=Observation.model_validate(outcome["observation"]), action=action,
                          parse_error=outcome.get("parse_error"), error=outcome.get("error"),
                          done=bool(outcome.get("done")), answer=outcome.get("answer"))

    async def evaluate(self, answer: str | None) -> float | None:
        from webrl.evaluation.harness_errors import EvaluationError  # lazily: the evaluators bring Playwright

        try:
            body = await self._post(f"/v1/episodes/{self.id}/evaluate", {"answer": answer})
        except PoolRefusedError as exc:
            if exc.status in (422, 504):  # the task's evaluator cannot run there, or did not settle
                raise EvaluationError(exc.detail) from exc
            raise
        return body.get("score")

    async def close(self) -> None:
        import httpx

        try:
            if self.id is not None:
                await self.http.delete(f"/v1/episodes/{self.id}")
        except httpx.TransportError:
            pass  # the pool went away mid-run: its episodes went with it, and the run's own error is raised
        finally:
            self.id = None
            await self.http.aclose()


def _detail(reply) -> str:  # reply: httpx.Response
    """The pool's error message: FastAPI's ``detail`` (a string or a validation error list), else the body."""
    try:
        detail = reply.json().get("detail")
    except ValueError:
        detail = None
    return str(detail if detail is not None else reply.text)[:500]


async def run_agent(task: TaskConfig, engine, settings: Settings, *, max_steps: int = MAX_STEPS,
                    temperature: float | None = None, evaluate: bool = True) -> Trajectory:
    """Run the served actor on ``task`` in a browser pool episode; the trajectory carries the env score."""

    async def decide(request: PolicyRequest) -> PolicyResponse:
        reply = await engine.act(ActRequest(batch=[ActItem.of(request)], temperature=temperature))
        return reply.results[0].policy_response()

    return await run_episode(RemoteEpisode(task, settings), task, decide, max_steps=max_steps, evaluate=evaluate,
                             actor_version=engine.version)
