"""Episodes of a policy on this pool's browsers: each task a :class:`LeasedEpisode` driven by the shared
episode loop (:func:`webrl.agent.episode_loop.run_episode`), with the browser pool's time limits; many at once with
their policy calls batched (:class:`services.browser_pool.batcher.Batcher`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

from playwright.async_api import Error as PlaywrightError

from services.browser_pool.batcher import BATCH_WAIT_S, Batcher
from services.browser_pool.episode import BrowserEpisode
from services.browser_pool.pool import BrowserPool
from webrl.agent import episode_loop
from webrl.agent.early_stop import MAX_STEPS, StopRules
from webrl.agent.environment import INFRASTRUCTURE_STOPS, EpisodeCrashed, StepResult
from webrl.agent.policy import Decide, Policy, PolicyRequest, PolicyResponse
from webrl.agent.schemas import Observation, TaskConfig, Trajectory
from webrl.config import Settings

log = logging.getLogger(__name__)


class LeasedEpisode:
    """A :class:`BrowserEpisode` as the episode loop's :class:`webrl.agent.environment.Environment`: ``reset``
    leases a browser and opens the episode. A Playwright error ends this episode, not the batch it runs in:
    it is raised as :class:`EpisodeCrashed` (reason ``browser_crashed`` when the browser died, else
    ``browser_error``); so is a start URL that did not open (``site_unreachable``: the agent would act on the
    browser's error page, and its failure would be stored as the actor's)."""

    def __init__(self, pool: BrowserPool, task: TaskConfig, settings: Settings, screenshots: bool = False) -> None:
        self.pool, self.settings, self.screenshots = pool, settings, screenshots
        self.task = task.resolved(settings)
        self.episode: BrowserEpisode | None = None
        self.shots: list[bytes | None] = []  # with ``screenshots``: the image of each observation, in order

    @contextmanager
    def _browser_errors(self) -> Iterator[None]:
        try:
            yield
        except PlaywrightError as exc:
            alive = self.episode is None or self.episode.slot.alive
            raise EpisodeCrashed("browser_error" if alive else "browser_crashed",
                                 exc.message.splitlines()[0]) from exc

    async def reset(self) -> Observation:
        with self._browser_errors():
            self.episode = await BrowserEpisode.open(self.pool, self.task, self.settings, self.screenshots)
        if self.episode.start_error is not None:
            raise EpisodeCrashed("site_unreachable", self.episode.start_error)
        assert self.episode.observation is not None
        self.shots.append(self.episode.screenshot)
        return self.episode.observation

    async def step(self, text: str) -> StepResult:
        assert self.episode is not None, "reset() the episode first"
        with self._browser_errors():
            result = await self.episode.step(text)
        self.shots.append(self.episode.screenshot)  # unchanged when the action did not touch the page
        return result

    async def evaluate(self, answer: str | None) -> float | None:
        assert self.episode is not None, "reset() the episode first"
        with self._browser_errors():
            return await self.episode.evaluate(answer)

    async def close(self) -> None:
        if self.episode is not None:
            await self.episode.close()


async def _run(task: TaskConfig, decide: Decide, pool: BrowserPool, settings: Settings, max_steps: int,
               stop_rules: StopRules, screenshots: bool = False) -> Trajectory:
    env = LeasedEpisode(pool, task, settings, screenshots)
    traj = await episode_loop.run_episode(env, task, decide, max_steps=max_steps,
                                          step_timeout_s=settings.browser.step_timeout_s,
                                          episode_timeout_s=settings.browser.episode_timeout_s, stop_rules=stop_rules)
    for step, shot in zip(traj.steps, env.shots, strict=False):  # step t saw observation t
        step.screenshot = shot
    return traj


async def run_episode(task: TaskConfig, policy: Policy, pool: BrowserPool, settings: Settings,
                      max_steps: int = MAX_STEPS, stop_rules: StopRules = StopRules()) -> Trajectory:
    """One episode of ``policy`` on ``task``: at most ``max_steps`` actions, early stops by ``stop_rules``;
    evaluated when the task has an ``eval`` block. Never raises for browser trouble (the trajectory's stop_reason
    says what happened); a policy that raises propagates."""

    async def decide(request: PolicyRequest) -> PolicyResponse:
        return (await policy.act([request]))[0]

    return await _run(task, decide, pool, settings, max_steps, stop_rules)


#: Runs again of an episode the machinery ended (a crashed browser or renderer, a failed browser call, a site that
#: did not answer): the pool replaces a dead browser, so a crash that the agent did not cause is not stored as the
#: agent's failure.
INFRASTRUCTURE_RETRIES = 2
#: Seconds before the n-th run again of an episode whose site did not answer (a container restarting takes seconds).
SITE_RETRY_WAIT_S = (5.0, 20.0)

#: Hears each finished episode as (index of its task in the batch, trajectory), before the next one takes its slot.
OnTrajectory = Callable[[int, Trajectory], Awaitable[None]]


async def _wait_for_site(retry: int) -> None:
    """The pause before the ``retry``-th run again of an episode whose site did not answer."""
    await asyncio.sleep(SITE_RETRY_WAIT_S[min(retry, len(SITE_RETRY_WAIT_S) - 1)])


async def run_batch(tasks: list[TaskConfig], policy: Policy, pool: BrowserPool, settings: Settings,
                    concurrency: int, max_steps: int = MAX_STEPS, batch_wait_s: float = BATCH_WAIT_S,
                    stop_rules: StopRules = StopRules(), screenshots: bool = False,
                    on_trajectory: OnTrajectory | None = None) -> list[Trajectory]:
    """Run ``tasks`` with up to ``concurrency`` episodes at once (bounded by the pool's size); the policy
    gets batches of requests. An episode the machinery ended (a stop reason of
    :data:`webrl.agent.environment.INFRASTRUCTURE_STOPS`) runs again, at most :data:`INFRASTRUCTURE_RETRIES` times,
    and its last run is its result. Trajectories come back in task order; with ``screenshots`` each step carries the
    image of the page it saw. ``on_trajectory`` hears each episode as it ends (a rollout stores it there, so a
    batch that fails part-way keeps what it finished); the episode's slot is released after it returns."""
    limit = asyncio.Semaphore(max(1, min(concurrency, pool.size)))
    batcher = Batcher(policy, batch_wait_s)

    async def one(index: int, task: TaskConfig) -> Trajectory:
        async with limit:
            batcher.join()
            try:
                for retry in range(INFRASTRUCTURE_RETRIES + 1):
                    traj = await _run(task, batcher.act, pool, settings, max_steps, stop_rules, screenshots)
                    if traj.stop_reason not in INFRASTRUCTURE_STOPS or retry == INFRASTRUCTURE_RETRIES:
                        break
                    log.warning("task %s: the episode ended by %s; it runs again on a fresh browser (%d of %d)",
                                task.task_id, traj.stop_reason, retry + 1, INFRASTRUCTURE_RETRIES)
                    if traj.stop_reason == "site_unreachable":
                        await _wait_for_site(retry)
            finally:
                batcher.leave()  # the other episodes' policy batches no longer wait for this one
            if on_trajectory is not None:
                await on_trajectory(index, traj)
            return traj

    try:
        async with asyncio.TaskGroup() as group:
            running = [group.create_task(one(i, task)) for i, task in enumerate(tasks)]
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None
    return [t.result() for t in running]
