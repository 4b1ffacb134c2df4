"""What the agent would see on any allowed page: each URL opened as an episode's start page, on the same pool,
stock of contexts and observation code as a rollout, and its first observation with timings
(``webrl pages check``)."""

from __future__ import annotations

import time

from services.browser_pool.episode import BrowserEpisode
from services.browser_pool.pool import BrowserPool
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.safety.allow_list import first_refused
from webrl.wire.contracts import CheckedPage, InvalidRequest, PageCheckRequest, PageCheckResult

CHECK_INTENT = "look at the page"  # the intent of the one-page task each URL is opened as


async def check_pages(request: PageCheckRequest, settings: Settings) -> PageCheckResult:
    """Open each URL in turn on one browser. Raises :class:`InvalidRequest` (field ``urls``) naming a URL off
    the allow-list before anything is opened."""
    if problem := first_refused(request.urls, settings.host_allow_list()):
        raise InvalidRequest("urls", problem)
    pages = []
    async with BrowserPool(settings, size=1) as pool:
        for index, url in enumerate(request.urls):
            task = TaskConfig(task_id=f"check-{index}", sites=[], intent=CHECK_INTENT, start_url=url)
            pages.append(await _check(pool, task, settings))
    return PageCheckResult(pages=pages)


async def _check(pool: BrowserPool, task: TaskConfig, settings: Settings) -> CheckedPage:
    started = time.perf_counter()
    episode = await BrowserEpisode.open(pool, task, settings)
    reset_ms = (time.perf_counter() - started) * 1000
    try:
        view = episode.view
        assert view is not None
        obs = view.observation
        return CheckedPage(url=task.start_url, final_url=obs.url, title=obs.title, tabs=obs.tabs,
                           observation=obs.html, elements=len(view.elements), error=obs.error,
                           reset_ms=round(reset_ms, 1), settle_ms=round(view.settle_ms, 1),
                           observe_ms=round(view.observe_ms, 1))
    finally:
        await episode.close()
