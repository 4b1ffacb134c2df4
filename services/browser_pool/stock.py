"""The stages (``stage.py``) one browser keeps ready, so that a reset never waits for a context to be made.

Per browser: :data:`FRESH_SPARES` fresh stages, made in the background once the episode that took one has
its first observation (so the making does not slow its reset down), and the last :data:`KEPT_REUSED`
scrubbed ones, each with its tab's renderer still warm for the origin it served.
:meth:`ContextStock.take` prefers, in order: a scrubbed stage on the episode's start origin, a fresh spare,
a stage of that origin given back or being scrubbed (scrubbing it now and waiting for it), any other scrubbed
stage, the spare being made, and only then makes one. With two kept, back-to-back episodes on one site
alternate between two tabs, each scrubbed while the other runs.

:meth:`ContextStock.give_back` does not wait for the scrub, nor does the scrub run during the next reset: the
given-back tab is frozen (its scripts stop: ``Stage.freeze``) and scrubbed once the next episode has its first
observation (:meth:`ContextStock.reset_done`), or after :data:`SCRUB_DELAY_S` when no reset comes. On two
cores a scrub running beside a reset (a navigation to ``about:blank`` and the storage clears) made the reset's
own navigation ~2x slower (measured 2026-11-26, commit 2230e09, static fixture pages, quiet machine: its ``goto``
p50 124 ms with the scrub beside it, 53 ms after it).

The stock also holds the browser's navigation guard (:mod:`webrl.safety.navigation_guard`), which reports to the
allow-list of the stage in use: one episode runs on a browser at a time, so one allow-list applies to all
its contexts; a stock is made for one allow-list (the pool replaces it when an episode needs another).

``warm=False`` is the pool without the stock: a context made for each episode and closed after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from playwright.async_api import Browser
from playwright.async_api import Error as PlaywrightError

from services.browser_pool.safety import AllowList
from services.browser_pool.stage import Cleanup, Stage, new_stage, scrub
from webrl.safety.allow_list import origin
from webrl.safety.navigation_guard import NavigationGuard

log = logging.getLogger(__name__)

FRESH_SPARES = 1  # fresh contexts kept ready per browser (each holds a renderer: ~20-40 MB)
KEPT_REUSED = 2  # scrubbed contexts kept per browser: one is scrubbed while the other serves the next episode
SCRUB_DELAY_S = 0.5  # a stage given back is scrubbed after this long when no next reset has finished before


@dataclass
class _GivenBack:
    """A stage whose episode ended, frozen, waiting to be scrubbed."""

    stage: Stage
    cleanup: Cleanup | None
    origin: str  # the origin its tab was on when the episode ended


class ContextStock:
    """Stages ready on one browser for one allow-list (module docstring)."""

    def __init__(self, browser: Browser, allowed: list[str], *, warm: bool = True) -> None:
        self.browser, self.allowed, self.warm = browser, list(allowed), warm
        self.fresh: list[Stage] = []
        self.kept: list[Stage] = []
        self.guard: NavigationGuard | None = None
        self.current: AllowList | None = None
        self.closed = False
        self._refill: asyncio.Task[None] | None = None
        self._given_back: list[_GivenBack] = []  # frozen, not scrubbed yet
        self._scrub_timer: asyncio.TimerHandle | None = None
        self._scrubs: dict[asyncio.Task[None], str] = {}  # running scrub -> the origin its stage served

    @classmethod
    async def open(cls, browser: Browser, allowed: list[str], *, warm: bool = True) -> ContextStock:
        """A stock with its navigation guard on ``browser``; its first spare is made in the background."""
        stock = cls(browser, allowed, warm=warm)
        stock.guard = await NavigationGuard.on_browser(browser, stock.allowed, stock._blocked)
        stock._refill_soon()
        return stock

    def _blocked(self, url: str, is_document: bool) -> None:
        if self.current is not None:
            self.current.record_guarded(url, is_document)

    # ----- taking and giving back ----------------------------------------------------------------------
    async def take(self, start_origin: str, **options: object) -> Stage:
        """A stage for an episode starting on ``start_origin``; ``options`` (a task's ``storage_state``) make
        a dedicated one. Raises a Playwright error when the browser cannot make a context."""
        if options or not self.warm:
            stage = await new_stage(self.browser, self.allowed, **options)
        else:
            stage = await self._ready(start_origin)
        self.current = stage.allow
        await stage.begin()
        return stage

    def reset_done(self) -> None:
        """The episode on the taken stage has its first observation: scrub what was given back and make a spare
        now, not during its reset."""
        self._scrub_given_back()
        self._refill_soon()

    async def _ready(self, start_origin: str) -> Stage:
        if same := self._kept_for(start_origin):
            return same
        if self.fresh:
            return self.fresh.pop()
        self._scrub_given_back(start_origin)
        scrubbing = [t for t, served in self._scrubs.items() if served == start_origin]
        if scrubbing:
            await asyncio.wait(scrubbing)
            if same := self._kept_for(start_origin):
                return same
        if self.kept:
            return self.kept.pop(0)
        if self._refill is not None:
            await asyncio.shield(self._refill)
            if self.fresh:
                return self.fresh.pop()
        return await new_stage(self.browser, self.allowed)

    def _kept_for(self, start_origin: str) -> Stage | None:
        """The most recently scrubbed stage of ``start_origin`` (its renderer the warmest), taken out."""
        for stage in reversed(self.kept):
            if stage.origin == start_origin:
                self.kept.remove(stage)
                return stage
        return None

    async def give_back(self, stage: Stage, cleanup: Cleanup | None = None) -> None:
        """The episode on ``stage`` ended: freeze it, to be scrubbed after the next reset (module docstring) and
        kept when reusable; or with ``warm=False`` run ``cleanup`` and close it now. ``cleanup`` runs once the
        episode's pages stopped."""
        self.current = None
        if not self.warm or stage.dedicated or self.closed:
            if cleanup is not None:
                await _logged(cleanup(stage.context), "episode cleanup")
            await stage.close()
            self._refill_soon()
            return
        await stage.freeze()
        self._given_back.append(_GivenBack(stage, cleanup, origin(stage.page.url)))
        if self._scrub_timer is None:
            self._scrub_timer = asyncio.get_running_loop().call_later(SCRUB_DELAY_S, self._scrub_given_back)

    def _scrub_given_back(self, only_origin: str | None = None) -> None:
        """Start the scrub of every stage given back (of ``only_origin``'s, when given) in the background."""
        waiting = [g for g in self._given_back if only_origin is None or g.origin == only_origin]
        self._given_back = [g for g in self._given_back if g not in waiting]
        if not self._given_back and self._scrub_timer is not None:
            self._scrub_timer.cancel()
            self._scrub_timer = None
        for given in waiting:
            task = asyncio.ensure_future(self._scrub_and_keep(given.stage, given.cleanup))
            self._scrubs[task] = given.origin
            task.add_done_callback(self._scrubs.pop)
        if waiting and only_origin is None:
            self._refill_soon()

    async def _scrub_and_keep(self, stage: Stage, cleanup: Cleanup | None) -> None:
        if not await scrub(stage, cleanup):
            return
        if self.closed:
            await stage.close()
            return
        self.kept.append(stage)
        while len(self.kept) > KEPT_REUSED:
            await self.kept.pop(0).close()

    def _refill_soon(self) -> None:
        if self.warm and not self.closed and len(self.fresh) < FRESH_SPARES and (
                self._refill is None or self._refill.done()):
            self._refill = asyncio.ensure_future(self._make_spare())

    async def _make_spare(self) -> None:
        try:
            stage = await new_stage(self.browser, self.allowed)
        except PlaywrightError as exc:  # the browser died; the pool relaunches it at the next lease
            log.info("could not make a spare context: %s", exc.message.splitlines()[0])
            return
        if self.closed:
            await stage.close()
        else:
            self.fresh.append(stage)

    async def idle(self) -> None:
        """Scrub what was given back and wait for the background work (scrubs, the spare being made): tests,
        benches and closing."""
        self._scrub_given_back()
        pending = [*self._scrubs, *([self._refill] if self._refill is not None else [])]
        if pending:
            await asyncio.wait(pending)

    # ----- teardown ------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Finish running scrubs (their cleanups free sandbox state), close every stage, drop the guard."""
        self.closed = True
        await self.idle()
        for stage in [*self.fresh, *self.kept]:
            await stage.close()
        self.fresh, self.kept = [], []
        if self.guard is not None:
            await self.guard.detach()
            self.guard = None


async def _logged(step: Awaitable[None], what: str) -> None:
    try:
        await step
    except Exception as exc:  # cleanup of a broken context must never take the pool down
        log.info("%s: %r", what, exc)
