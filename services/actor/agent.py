"""Agent runs: one episode of the served actor through the browser pool service (over HTTP).

The actor service owns no browser: it opens an episode on the browser pool (``POST /v1/episodes``), asks
itself for an action at each step (``ActorEngine.act``), sends the action text to the episode's ``step``
route, and at the end asks the pool to evaluate and close the episode.
"""

from __future__ import annotations

import uuid

from webrl.actions import parse_action
from webrl.allow_list import start_url_problem
from webrl.config import SITE_PLACEHOLDERS, Settings
from webrl.early_stop import MAX_STEPS, EarlyStop
from webrl.models.actor_api import ActItem, ActRequest
from webrl.schemas import Observation, Step, TaskConfig, Trajectory, resolve_placeholders


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


def resolve_run(body, settings: Settings) -> TaskConfig:  # body: services.actor.schemas.AgentRunRequest
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


# The episode loop ------------------------------------------------------------------------------------------
POOL_TIMEOUT_S = 120.0  # one browser pool call (opening an episode logs in and loads the start page)


class PoolUnavailableError(RuntimeError):
    """The browser pool service could not be reached, or had no browser to give (the run never started or
    could not finish); the actor answers 503 with this message."""


class BrowserPoolClient:
    """The browser pool service's episode routes."""

    def __init__(self, settings: Settings) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self.http = httpx.AsyncClient(base_url=settings.browser_pool_url, timeout=POOL_TIMEOUT_S, headers=headers)

    async def _post(self, path: str, body: dict) -> dict:
        import httpx

        try:
            reply = await self.http.post(path, json=body)
        except httpx.TransportError as exc:
            raise PoolUnavailableError(f"browser pool at {self.http.base_url} unreachable ({path}): "
                                       f"{exc or type(exc).__name__}") from exc
        if reply.status_code == 503:
            raise PoolUnavailableError(f"browser pool at {self.http.base_url} busy: {reply.text[:200]}")
        reply.raise_for_status()
        return reply.json()

    async def open(self, task: TaskConfig) -> tuple[str, Observation]:
        body = await self._post("/v1/episodes", {"task": task.to_json()})
        return str(body["episode_id"]), Observation.model_validate(body["observation"])

    async def step(self, episode_id: str, text: str) -> dict:
        return await self._post(f"/v1/episodes/{episode_id}/step", {"action": text})

    async def evaluate(self, episode_id: str, answer: str | None) -> float | None:
        body = await self._post(f"/v1/episodes/{episode_id}/evaluate", {"answer": answer})
        return body.get("score")

    async def close(self, episode_id: str) -> None:
        import httpx

        try:
            await self.http.delete(f"/v1/episodes/{episode_id}")
        except httpx.TransportError:
            pass  # the pool went away mid-run: its episodes went with it, and the run's own error is raised

    async def aclose(self) -> None:
        await self.http.aclose()


async def _episode(pool: BrowserPoolClient, episode_id: str, obs: Observation, task: TaskConfig, engine,
                   traj: Trajectory, max_steps: int, temperature: float | None) -> Observation:
    early_stop = EarlyStop()
    traj.stop_reason = "max_steps"
    for index in range(max_steps):
        item = ActItem(intent=task.intent, observation=obs, history=[s.response for s in traj.steps])
        result = (await engine.act(ActRequest(batch=[item], temperature=temperature))).results[0]
        traj.actor_version = result.version
        outcome = await pool.step(episode_id, result.response)
        action = parse_action(outcome["action"]) if outcome.get("action") else None  # canonical text
        traj.steps.append(Step(index=index, observation=obs, response=result.response, action=action,
                               parse_error=outcome.get("parse_error"), token_ids=result.token_ids,
                               logprobs=result.logprobs, url=obs.url, error=outcome.get("error")))
        obs = Observation.model_validate(outcome["observation"])
        if outcome.get("done"):
            traj.answer, traj.stop_reason = outcome.get("answer"), "exit"
            break
        stop = early_stop.update(action)
        if stop:
            traj.stop_reason = stop
            break
    return obs


async def run_agent(task: TaskConfig, engine, settings: Settings, *, max_steps: int = MAX_STEPS,
                    temperature: float | None = None, evaluate: bool = True) -> Trajectory:
    """Run the served actor on ``task`` in a browser pool episode; the trajectory carries the env score."""
    traj = Trajectory(task_id=str(task.task_id), intent=task.intent, actor_version=engine.version)
    pool = BrowserPoolClient(settings)
    try:
        episode_id, obs = await pool.open(task)
        try:
            traj.last_observation = await _episode(pool, episode_id, obs, task, engine, traj, max_steps, temperature)
            if evaluate:
                traj.env_score = await pool.evaluate(episode_id, traj.answer)
        finally:
            await pool.close(episode_id)
    finally:
        await pool.aclose()
    if traj.steps:
        traj.steps[-1].done = True
    return traj
