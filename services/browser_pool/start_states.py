"""Start states of tasks: open each task's episode, take its first observation, close it.

The curriculum filter values a task by its start state (intent + first page), so ``rollout.observe``
returns exactly what the actor would see at step 0.
"""

from __future__ import annotations

import asyncio

from services.browser_pool.episode import BrowserEpisode
from services.browser_pool.pool import BrowserPool
from services.browser_pool.rollout import UnknownTasksError
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.db import repository
from webrl.db.session import session_scope
from webrl.wire.contracts import ObserveRequest, ObserveResult, StartState


def _configs(settings: Settings, keys: list[str]) -> dict[str, TaskConfig]:
    with session_scope(settings) as session:
        rows = repository.tasks_by_keys(session, keys)
        missing = sorted(set(keys) - {r.key for r in rows})
        if missing:
            raise UnknownTasksError(f"unknown task keys: {', '.join(missing[:10])}")
        return {r.key: repository.task_config(r) for r in rows}


async def observe_starts(payload: ObserveRequest, settings: Settings) -> ObserveResult:
    """The first state of every task, in the request's order."""
    configs = _configs(settings, payload.task_keys)
    limit = asyncio.Semaphore(payload.concurrency)

    async def one(pool: BrowserPool, key: str) -> StartState:
        async with limit:
            episode = await BrowserEpisode.open(pool, configs[key], settings)
            try:
                obs = episode.observation
                return StartState(key=key, intent=configs[key].intent, observation=obs.html, url=obs.url)
            finally:
                await episode.close()

    async with BrowserPool(settings, size=min(payload.concurrency, len(configs))) as pool:
        states = await asyncio.gather(*(one(pool, k) for k in payload.task_keys))
    return ObserveResult(states=list(states))
