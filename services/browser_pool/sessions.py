"""What the REST service holds between requests: live episodes (each on a leased browser) and rollout jobs.

An episode is a lease on a browser: one that gets no request (step, evaluate, delete) for
``WEBRL_BROWSER__EPISODE_IDLE_S`` is closed and its browser freed (a client that went away would otherwise hold it
for good); its id then answers 404 saying it expired.

Embedded mode runs a rollout job as an asyncio task on the service's own pool; distributed mode (a broker
configured) sends ``rollout.run`` to the ``rollout`` queue and reads the job from the result backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from services.browser_pool.episode import BrowserEpisode
from services.browser_pool.pool import BrowserPool
from services.browser_pool.rollout import run_rollout
from webrl.agent.environment import EpisodeCrashed, StepResult
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.serving.finished_jobs import FinishedJobs
from webrl.wire.contracts import RolloutRequest

log = logging.getLogger(__name__)


REAP_EVERY = 0.25  # idle episodes are looked for every quarter of the idle limit (so freed within 1.25x of it)
MAX_REAP_PERIOD_S = 30.0  # ... and at least this often
REMEMBERED_EXPIRED = 1000  # ids of expired episodes kept to say "expired" instead of "not found"


class EpisodeNotFound(LookupError):
    """No live episode with this id (the message says whether it expired)."""


class PoolBusy(RuntimeError):
    """No browser became free in time."""


class EvaluationTimedOut(RuntimeError):
    """An episode's evaluation ran past its time limit: the episode was closed and its browser freed."""


class JobView(BaseModel):
    job_id: str
    status: Literal["pending", "running", "succeeded", "failed"]
    result: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class _Live:
    episode: BrowserEpisode
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    steps: int = 0
    last_used: float = field(default_factory=time.monotonic)

    def idle_for(self, now: float) -> float:
        """Seconds since the last request ended; 0 while one runs."""
        return 0.0 if self.lock.locked() else now - self.last_used


class EpisodeManager:
    """Live episodes and jobs of one browser-pool service process."""

    def __init__(self, settings: Settings, pool: BrowserPool) -> None:
        self.settings, self.pool = settings, pool
        self._episodes: dict[str, _Live] = {}
        self._running_jobs: dict[str, JobView] = {}
        self._finished_jobs: FinishedJobs[JobView] = FinishedJobs()
        self._job_tasks: set[asyncio.Task[None]] = set()
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._reaper: asyncio.Task[None] | None = None

    async def create(self, task: TaskConfig) -> BrowserEpisode:
        self._start_reaper()
        await self.reap_idle()  # an abandoned episode's browser is free before this one waits for one
        try:
            episode = await asyncio.wait_for(BrowserEpisode.open(self.pool, task, self.settings),
                                             self.settings.browser.step_timeout_s)
        except TimeoutError:
            raise PoolBusy(f"no browser free within {self.settings.browser.step_timeout_s:.0f} s") from None
        self._episodes[episode.id] = _Live(episode)
        return episode

    def _live(self, episode_id: str) -> _Live:
        if episode_id not in self._episodes:
            if episode_id in self._expired:
                raise EpisodeNotFound(f"episode {episode_id!r} expired: no request for "
                                      f"{self.settings.browser.episode_idle_s:g} s (WEBRL_BROWSER__EPISODE_IDLE_S)")
            raise EpisodeNotFound(f"episode {episode_id!r} not found")
        return self._episodes[episode_id]

    # ----- idle leases ---------------------------------------------------------------------------------
    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.ensure_future(self._reap_forever())

    async def _reap_forever(self) -> None:
        period = min(self.settings.browser.episode_idle_s * REAP_EVERY, MAX_REAP_PERIOD_S)
        while True:
            await asyncio.sleep(period)
            try:
                await self.reap_idle()
            except Exception:  # one episode failing to close must not stop the reaping of the others
                log.exception("closing idle episodes failed")

    async def reap_idle(self) -> list[str]:
        """Close the episodes idle longer than ``browser.episode_idle_s`` (their browsers go back to the pool);
        returns their ids. Each is looked at again at its turn, after the closes before it: one a request took up
        meanwhile stays, one another reaper or a delete closed meanwhile is left to it."""
        limit, closed = self.settings.browser.episode_idle_s, []
        for episode_id, live in list(self._episodes.items()):
            now = time.monotonic()
            if self._episodes.get(episode_id) is not live or live.idle_for(now) <= limit:
                continue
            del self._episodes[episode_id]
            self._expired[episode_id] = None
            while len(self._expired) > REMEMBERED_EXPIRED:
                self._expired.popitem(last=False)
            log.info("episode %s idle for %.0f s: closed, browser freed", episode_id, now - live.last_used)
            closed.append(episode_id)
            await live.episode.close()
        return closed

    async def step(self, episode_id: str, text: str) -> StepResult:
        """One step; steps of one episode run one at a time. A dead browser or a step over its time limit
        ends the episode (done, with the error) and frees its browser."""
        live = self._live(episode_id)
        async with live.lock:
            live.steps += 1
            try:
                return await asyncio.wait_for(live.episode.step(text), self.settings.browser.step_timeout_s)
            except (EpisodeCrashed, TimeoutError) as exc:
                message = str(exc) or f"step took longer than {self.settings.browser.step_timeout_s:.0f} s"
                await self._close(episode_id, live)
                assert live.episode.observation is not None
                obs = live.episode.observation.model_copy(update={"error": message})
                return StepResult(observation=obs, action=None, error=message, done=True)
            finally:
                live.last_used = time.monotonic()

    async def evaluate(self, episode_id: str, answer: str | None) -> float | None:
        """The episode's score. An evaluation over ``browser.step_timeout_s`` (a page script that never settles)
        ends the episode and frees its browser, as a step over it does: its lock would otherwise keep the idle
        reaper away from that browser for good, whether or not a client still waits."""
        live = self._live(episode_id)
        limit = self.settings.browser.step_timeout_s
        async with live.lock:
            try:
                return await asyncio.wait_for(live.episode.evaluate(answer), limit)
            except TimeoutError:
                await self._close(episode_id, live)
                raise EvaluationTimedOut(f"the evaluation took longer than {limit:.0f} s "
                                         "(WEBRL_BROWSER__STEP_TIMEOUT_S); the episode is closed") from None
            finally:
                live.last_used = time.monotonic()

    async def delete(self, episode_id: str) -> None:
        """Close an episode once the step or evaluation running on it (if any) has ended: its browser goes back to
        the pool only when no request uses it (a free browser is handed to the next episode)."""
        live = self._live(episode_id)
        async with live.lock:
            await self._close(episode_id, live)

    async def _close(self, episode_id: str, live: _Live) -> None:
        """Close ``live`` unless another request closed it meanwhile (the caller holds its lock, or the service
        is closing)."""
        if self._episodes.get(episode_id) is live:
            del self._episodes[episode_id]
            await live.episode.close()

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for episode_id, live in list(self._episodes.items()):
            await self._close(episode_id, live)
        for task in list(self._job_tasks):
            task.cancel()
        await self.pool.close()

    # ----- jobs ----------------------------------------------------------------------------------------
    async def submit(self, payload: RolloutRequest) -> JobView:
        """Queue a rollout job (on the broker, in a thread: its client blocks; embedded: a task on this loop)."""
        if not self.settings.eager:
            from webrl.wire.queue import submit_job

            job_id = await asyncio.to_thread(submit_job, "rollout.run", payload.model_dump(mode="json"))
            return JobView(job_id=job_id, status="pending")
        job = JobView(job_id=uuid.uuid4().hex, status="running")
        self._running_jobs[job.job_id] = job
        task = asyncio.ensure_future(self._run_job(job, payload))
        self._job_tasks.add(task)
        task.add_done_callback(self._job_tasks.discard)
        return job

    async def _run_job(self, job: JobView, payload: RolloutRequest) -> None:
        try:
            result = await run_rollout(payload, self.settings, pool=self.pool)
        except Exception as exc:
            log.exception("rollout job %s failed", job.job_id)
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        else:
            job.status, job.result = "succeeded", result.model_dump(mode="json")
        finally:  # a cancelled job (the service closing) is dropped with the process
            self._running_jobs.pop(job.job_id, None)
            if job.status != "running":
                self._finished_jobs.add(job.job_id, job)

    async def job(self, job_id: str) -> JobView | None:
        """A job's state (from the broker's result backend, in a thread; embedded: this process's jobs)."""
        if self.settings.eager:
            return self._running_jobs.get(job_id) or self._finished_jobs.get(job_id)
        from webrl.wire.queue import job_state

        known = await asyncio.to_thread(job_state, job_id)
        if known is None:  # an id no one submitted
            return None
        status = "pending" if known.status == "waiting" else known.status
        return JobView(job_id=job_id, status=status, result=known.result, error=known.error)

