"""The browser environment: one episode of a task on a leased Chromium. Reset (``open``), observe
(``refresh``), act (``step``, with WebRL action text), evaluate, close. The episode loop that drives it is
:func:`webrl.agent.episode_loop.run_episode` (see ``runs.py``); the REST routes drive it step by step (``sessions.py``).

Reset (``BrowserEpisode.open``): resolve the ``__SITE__`` placeholders, take a clean context from the leased
browser's stock (``stock.py``: made ahead of time, or scrubbed after an earlier episode on the same origin;
WebArena's 1280x720 viewport), log in (the task's storage_state file when it exists, read from the artifacts
store only, :func:`webrl.serving.paths.confined_path`; else the sandbox's login cookies for each site of a
``require_login`` task), set the geolocation, put the context in its own sandbox episode (cookie
``webrl_episode``), open each `` |AND| `` part of ``start_url`` in a tab (the first in the context's own tab),
make the first tab active and observe it. Close gives the context back to the stock, which scrubs it in the
background.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from playwright.async_api import BrowserContext, Dialog, Download, Frame, Page, Request
from playwright.async_api import Error as PlaywrightError

from services.browser_pool.act import execute
from services.browser_pool.observe import ElementMap, PageView, observe_view
from services.browser_pool.pool import BrowserPool, BrowserSlot
from services.browser_pool.safety import AllowList
from services.browser_pool.stage import Stage
from services.browser_pool.stock import ContextStock
from services.browser_pool.storage_state import StorageState, StorageStateInvalid, read_storage_state
from webrl.agent.actions import ActionParseError, ActionType, parse_action
from webrl.agent.environment import EpisodeCrashed, StepResult
from webrl.agent.schemas import Observation, TaskConfig
from webrl.config import SITE_PLACEHOLDERS, Settings
from webrl.safety.allow_list import canonical_start_url, origin, start_url_problem
from webrl.serving.paths import PathOutsideArtifacts, confined_path

log = logging.getLogger(__name__)

GOTO_TIMEOUT_MS = 30_000  # opening a start URL
POPUP_WAIT_S = 5.0  # a page that opened a tab: wait this long at most for the tab to show up
NAVIGATION_WAIT_S = 10.0  # a navigation that started while observing: wait this long at most for it
LEAVING_WAIT_S = 5.0  # a page that said it is leaving: wait this long at most for its navigation to show
EPISODE_CLEANUP_TIMEOUT_S = 5.0  # freeing a sandbox episode's state and closing the context
SCREENSHOT_TIMEOUT_MS = 10_000  # one viewport screenshot (a few tens of ms on the sandbox pages)
#: Why a page did not load, for the failures an agent cannot read off Chromium's blank error page.
FAILURE_REASONS = {"net::ERR_UNSAFE_REDIRECT": "it redirected to a page the browser never opens (file:, chrome:)"}
#: Failed navigations not reported: one replaced by another, and the allow-list's own (reported as blocked).
QUIET_FAILURES = ("net::ERR_ABORTED", "net::ERR_BLOCKED_BY_CLIENT")


class StartUrlRefused(EpisodeCrashed):
    """A start URL the pool does not open (not http(s), or a host off the allow-list); no browser was used."""

    def __init__(self, message: str) -> None:
        super().__init__("start_url_refused", f"start_url: {message}")


class StorageStateRefused(EpisodeCrashed):
    """A ``storage_state`` path outside the artifacts store (the pool reads login files from there only), or a file
    there that is no login file (:mod:`services.browser_pool.storage_state`); no browser was used."""

    def __init__(self, message: str) -> None:
        super().__init__("storage_state_refused", message)


def storage_state_file(task: TaskConfig, settings: Settings) -> StorageState | None:
    """The task's login file inside the artifacts store (``./.auth/shopping_state.json`` is
    ``<artifacts>/.auth/shopping_state.json``), read and checked, or None when the task names none or it does not
    exist there. Raises :class:`StorageStateRefused` for a path that leaves the store, a folder, or a file that is
    no login file."""
    if not task.storage_state:
        return None
    try:
        path = confined_path(settings, task.storage_state, "storage_state")
    except PathOutsideArtifacts as exc:
        raise StorageStateRefused(str(exc)) from None
    if path.exists() and not path.is_file():  # a folder (or a device): no login file, and no silent "no login"
        raise StorageStateRefused(f"storage_state: {task.storage_state!r} is not a file")
    if not path.exists():
        return None
    try:
        return read_storage_state(path)
    except StorageStateInvalid as exc:
        raise StorageStateRefused(f"storage_state: {task.storage_state!r}: {exc}") from None


@dataclass
class _Notes:
    """Things that happened in the browser since the last observation (reported with it)."""

    items: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.items.append(text)

    def take(self) -> list[str]:
        out, self.items = self.items, []
        return out


def _dedicated_options(storage_state: StorageState | None) -> dict[str, object]:
    """Context options a stock context cannot take afterwards: a storage_state that sets localStorage (its
    cookies alone are added to any context)."""
    if storage_state is None or not storage_state.sets_local_storage:
        return {}
    return {"storage_state": storage_state.playwright()}


async def _prepare(stage: Stage, task: TaskConfig, settings: Settings, episode_id: str,
                   storage_state: StorageState | None) -> None:
    """The task's login, geolocation and sandbox episode on a clean stage (``storage_state``: the task's login
    file in the artifacts store, :func:`storage_state_file`)."""
    context = stage.context
    cookies = _episode_cookies(settings, episode_id)
    has_state = storage_state is not None
    if storage_state is not None and not stage.dedicated:
        cookies += storage_state.cookie_dicts()
    if (task.require_login or task.storage_state) and not has_state:
        cookies += _login_cookies(task, settings)
    if cookies:
        await context.add_cookies(cookies)
    if task.geolocation is not None:
        stage.overrides = True  # before the calls: a scrub must take back even a half-made override
        await context.grant_permissions(["geolocation"])
        await context.set_geolocation(task.geolocation.model_dump(exclude_none=True))  # type: ignore[arg-type]


def _episode_cookies(settings: Settings, episode_id: str) -> list[dict]:
    try:
        from webrl.sandbox.store import episode_cookies
    except ImportError:  # a deployment without the sandbox package: real sites keep their own state
        return []
    return episode_cookies(settings, episode_id)


def _login_cookies(task: TaskConfig, settings: Settings) -> list[dict]:
    from webrl.sandbox.auth import DEFAULT_ACCOUNTS, login_cookies

    return [c for site in task.sites if site in DEFAULT_ACCOUNTS for c in login_cookies(site, settings.site_url(site))]


class BrowserEpisode:
    """One episode on a leased browser: a context, its tabs (the active one is observed), the last ids."""

    def __init__(self, pool: BrowserPool, slot: BrowserSlot, task: TaskConfig, settings: Settings,
                 stock: ContextStock, stage: Stage, episode_id: str, screenshots: bool = False) -> None:
        self.pool, self.slot, self.task, self.settings = pool, slot, task, settings
        self.stock, self.stage, self.id = stock, stage, episode_id
        self.context: BrowserContext = stage.context
        self.allow: AllowList = stage.allow
        self._watched: list[Page] = []
        self.notes = _Notes()
        self.active: Page | None = None
        self.elements: ElementMap = {}
        self.observation: Observation | None = None
        self.view: PageView | None = None  # the last observation with its ids and timings
        self.screenshots = screenshots
        self.screenshot: bytes | None = None  # the page of ``observation`` (``webrl.store.screenshots``), when taken
        self.closed = False
        self.page_crashed = False
        self.start_error: str | None = None  # why the task's start URL did not open (a site down), if it did not
        self._new_page = asyncio.Event()
        self._navigations: set[Request] = set()  # main-frame navigation requests not yet committed or done
        self._navigation_done = asyncio.Event()
        self._navigation_done.set()
        self._navigation_seen = asyncio.Event()  # a main-frame navigation began or committed since the last action

    # ----- reset ---------------------------------------------------------------------------------------
    @classmethod
    async def open(cls, pool: BrowserPool, task: TaskConfig, settings: Settings,
                   screenshots: bool = False) -> BrowserEpisode:
        """Reset: a fresh context for ``task`` (placeholders resolved) with its start tabs open, on a browser
        leased from ``pool``. Returns the episode; its ``.observation`` is the first observation (and with
        ``screenshots`` its ``.screenshot`` the page's image, after every observation). On failure the
        browser goes back to the pool and the error (a Playwright error, :class:`EpisodeCrashed`) is raised."""
        resolved = task.resolved(settings)
        allowed = settings.host_allow_list()
        urls = resolved.start_urls(settings)
        for problem in filter(None, (start_url_problem(url, allowed) for url in urls)):
            raise StartUrlRefused(problem)
        urls = [canonical_start_url(url) for url in urls]  # opened as checked (webrl.safety.allow_list)
        storage_state = storage_state_file(resolved, settings)
        slot = await pool.acquire()
        episode_id = uuid.uuid4().hex[:16]
        try:
            stock = await pool.stock(slot, allowed)
            stage = await stock.take(origin(urls[0]), **_dedicated_options(storage_state))
        except BaseException:
            pool.release(slot)
            raise
        episode = cls(pool, slot, resolved, settings, stock, stage, episode_id, screenshots)
        try:
            await _prepare(stage, resolved, settings, episode_id, storage_state)
            await episode._open_tabs(urls)
            await asyncio.gather(stage.after_first_navigation(), episode.refresh())  # independent round trips
        except BaseException:
            await episode.close()
            raise
        stock.reset_done()
        return episode

    async def _open_tabs(self, urls: list[str]) -> None:
        """The first URL in the stage's own tab, each other one in a new tab; the first tab is active."""
        self.active = first = self.stage.page
        for index, url in enumerate(urls):
            page = first if index == 0 else await self.context.new_page()
            self._watch(page)
            try:
                await page.goto(url, wait_until="load", timeout=GOTO_TIMEOUT_MS)
            except PlaywrightError as exc:
                self._check_alive()
                self.notes.add(f"could not open {url}: {exc.message.splitlines()[0]}")
                if index == 0:
                    self.start_error = f"could not open the start URL {url}: {exc.message.splitlines()[0]}"
        if len(urls) > 1:
            await first.bring_to_front()
        self.context.on("page", self._on_new_page)

    # ----- browser events ------------------------------------------------------------------------------
    def _watch(self, page: Page) -> None:
        self._watched.append(page)
        for event, handler in self._handlers():
            page.on(event, handler)

    def _handlers(self) -> list[tuple[str, Callable[..., object]]]:
        return [("request", self._on_request), ("requestfinished", self._on_request_done),
                ("requestfailed", self._on_request_failed), ("framenavigated", self._on_navigated),
                ("dialog", self._on_dialog), ("download", self._on_download), ("crash", self._on_crash),
                ("close", self._on_close)]

    def _on_request(self, request: Request) -> None:
        """A main-frame navigation has started (Enter in a form, a script setting location): the page on
        screen is about to be replaced, so an observation taken now would be stale."""
        if request.is_navigation_request() and request.frame.parent_frame is None:
            self._navigations.add(request)
            self._navigation_done.clear()
            self._navigation_seen.set()

    def _on_request_done(self, request: Request) -> None:
        self._navigations.discard(request)
        if not self._navigations:
            self._navigation_done.set()

    def _on_request_failed(self, request: Request) -> None:
        """A main-frame navigation the browser refused, e.g. a redirect to ``file:`` or ``chrome:``: the tab shows
        a blank error page, so the observation says why."""
        self._on_request_done(request)
        failure = request.failure or ""
        if request.is_navigation_request() and request.frame.parent_frame is None and failure not in QUIET_FAILURES:
            why = f"{FAILURE_REASONS[failure]} ({failure})" if failure in FAILURE_REASONS else failure
            self.notes.add(f"{request.url} did not load: {why}")

    def _on_navigated(self, frame: Frame) -> None:
        if frame.parent_frame is None:
            self._navigation_seen.set()
            self._navigations = {r for r in self._navigations if r.frame is not frame}
            if not self._navigations:
                self._navigation_done.set()

    def _unwatch(self) -> None:
        """Stop hearing the episode's pages (the context outlives the episode when the stock reuses it)."""
        self.context.remove_listener("page", self._on_new_page)
        for page in self._watched:
            for event, handler in self._handlers():
                page.remove_listener(event, handler)
        self._watched = []

    def _on_new_page(self, page: Page) -> None:
        """A popup or target=_blank link: it becomes the active tab, as it would for a person."""
        self._watch(page)
        self.active = page
        self._new_page.set()
        self.notes.add("a new tab opened and is now active")

    def _on_close(self, page: Page) -> None:
        if page is self.active:
            open_pages = [p for p in self.context.pages if not p.is_closed()]
            self.active = open_pages[-1] if open_pages else None

    async def _on_dialog(self, dialog: Dialog) -> None:
        self.notes.add(f"a {dialog.type} dialog said {dialog.message[:200]!r} and was accepted")
        await dialog.accept()

    def _on_download(self, download: Download) -> None:
        self.notes.add(f"download of {download.suggested_filename!r} was blocked")

    def _on_crash(self, page: Page) -> None:
        self.page_crashed = True
        log.warning("page crashed in episode %s: %s", self.id, page.url)

    def _check_alive(self) -> None:
        if not self.slot.alive:
            raise EpisodeCrashed("browser_crashed", "the browser process died during the episode")
        if self.page_crashed:
            raise EpisodeCrashed("page_crashed", "the page's renderer crashed during the episode")

    # ----- observe and act -----------------------------------------------------------------------------
    def _error_text(self, error: str | None) -> str | None:
        blocked = [u for u, nav in self.allow.take_blocked() if nav]
        parts = [error] if error else []
        parts += [f"blocked navigation to {u} (host not allowed)" for u in blocked[:3]]
        parts += self.notes.take()
        return "; ".join(parts) or None

    async def refresh(self, error: str | None = None) -> PageView:
        """Observe the active tab and remember its ids. If the page just opened a tab, wait for that tab
        (event-driven, at most POPUP_WAIT_S) and observe it instead. Returns the page view: the observation
        (its ``error`` carries ``error`` and what happened in the browser since the last observation; it is
        also ``.observation``) and the element ids. Raises :class:`EpisodeCrashed` when the page cannot be observed."""
        view: PageView | None = None
        for _ in range(4):
            page = await self._active_page()
            try:
                view = await observe_view(page, on_stayed=self._wait_leaving)
            except PlaywrightError as exc:
                self._check_alive()
                if page is not self.active:
                    continue
                message = f"could not observe the page: {exc.message.splitlines()[0]}"
                raise EpisodeCrashed("page_error", message) from exc
            if self._navigations and page is self.active:  # a navigation began while observing: wait, again
                await self._wait_navigation()
                continue
            if view.popups and page is self.active:
                try:
                    await asyncio.wait_for(self._new_page.wait(), POPUP_WAIT_S)
                except TimeoutError:
                    self.notes.add("the page tried to open a tab that never appeared")
            if page is self.active:
                break
        if view is None:
            raise EpisodeCrashed("page_error", "the active tab kept changing; could not observe it")
        self._new_page.clear()
        view.observation.error = self._error_text(error)
        self.elements, self.observation, self.view = view.elements, view.observation, view
        if self.screenshots:
            self.screenshot = await self._capture(page)
        return view

    async def _capture(self, page: Page) -> bytes | None:
        """The viewport as :func:`webrl.store.screenshots.encode` stores it; None (logged) when the page cannot be
        captured: a missing picture never ends an episode."""
        from webrl.store.screenshots import CAPTURE_QUALITY, encode

        try:
            captured = await page.screenshot(type="jpeg", quality=CAPTURE_QUALITY, timeout=SCREENSHOT_TIMEOUT_MS)
        except PlaywrightError as exc:
            log.info("episode %s: no screenshot: %s", self.id, exc.message.splitlines()[0])
            return None
        return await asyncio.to_thread(encode, captured)

    async def _wait_navigation(self) -> None:
        try:
            await asyncio.wait_for(self._navigation_done.wait(), NAVIGATION_WAIT_S)
        except TimeoutError:
            self._navigations.clear()
            self.notes.add(f"a navigation did not finish within {NAVIGATION_WAIT_S:.0f} s")

    async def _wait_leaving(self, page: Page) -> None:
        """``page`` said it is leaving (a form submitted, a link followed) and was still there after observe.js's
        quick wait: on a loaded machine the navigation's request can reach us later than that, and reading the
        page then gives the step the page it left. Wait for the navigation to show (at most LEAVING_WAIT_S: one
        answered with 204, or cancelled, never does), then for it to finish."""
        if page is not self.active:
            return
        started = time.perf_counter()
        if not self._navigations:
            try:
                await asyncio.wait_for(self._navigation_seen.wait(), LEAVING_WAIT_S)
            except TimeoutError:
                log.info("episode %s: %s said it was leaving; no navigation in %.0f s", self.id, page.url,
                         LEAVING_WAIT_S)
                return
        await self._wait_navigation()
        log.info("episode %s: waited %.0f ms for %s to leave", self.id, (time.perf_counter() - started) * 1000,
                 page.url)

    async def _active_page(self) -> Page:
        if self.active is None:  # every tab was closed: open a blank one (the context's page handler watches it)
            self.active = await self.context.new_page()
        return self.active

    async def step(self, text: str) -> StepResult:
        """Parse ``text`` as a WebRL action, carry it out, observe (:meth:`webrl.agent.environment.Environment.step`).
        Returns the observation after the action and what happened; a text that does not parse or an action
        that fails comes back as an error in the result and in the observation. Raises
        :class:`EpisodeCrashed` when the browser or the page died."""
        assert self.observation is not None, "open() the episode first"
        try:
            action = parse_action(text)
        except ActionParseError as exc:
            error = f"could not parse the action: {exc}"
            obs = self.observation.model_copy(update={"error": error})
            self.observation = obs
            return StepResult(observation=obs, action=None, parse_error=str(exc), error=error)
        if action.type is ActionType.EXIT:
            obs = self.observation.model_copy(update={"error": None})
            return StepResult(observation=obs, action=action, done=True, answer=action.message)
        self._check_alive()
        assert self.active is not None
        self._navigation_seen.clear()
        try:
            error = await execute(self.active, action, self.elements)
        except PlaywrightError as exc:
            self._check_alive()
            error = f"{action.type.value} failed: {exc.message.splitlines()[0]}"
        view = await self.refresh(error)
        return StepResult(observation=view.observation, action=action, error=error)

    async def evaluate(self, answer: str | None) -> float | None:
        """The task's evaluator score (0..1) for ``answer`` on the current state; None when the task has no eval.
        Raises :class:`webrl.evaluation.harness_errors.EvaluationError` when its evaluator cannot run here."""
        if self.task.eval is None:
            return None
        from webrl.evaluation import build_evaluator

        evaluator = build_evaluator(self.task, self.settings)
        url = self.active.url if self.active is not None else ""
        return float(await evaluator.score(answer, url, self.context))

    # ----- teardown ------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Give the context back to the stock (which frees the sandbox episode's state and scrubs or closes
        it) and the browser to the pool. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        try:
            self._unwatch()
            if self.slot.alive:
                await asyncio.wait_for(self.stock.give_back(self.stage, self._free_sandbox_state),
                                       EPISODE_CLEANUP_TIMEOUT_S)
            else:  # the browser died: its context can send nothing, so this process frees the sandbox state
                await self._free_sandbox_state_here()
                await self.stage.close()
        except Exception as exc:  # cleanup of a broken context must never take the pool down
            log.info("episode %s cleanup: %r; its context is closed instead", self.id, exc)
            await self._abandon()
        finally:
            self.pool.release(self.slot)

    async def _abandon(self) -> None:
        """A context the stock could not take back (freezing a page stuck in a script timed out): free the sandbox
        episode's state and close the context, each bounded, so that no context (a renderer, often spinning) and
        no copy of the sandbox's databases is left behind for the life of the browser."""
        cleanups = [self._free_sandbox_state(self.context) if self.slot.alive else self._free_sandbox_state_here()]
        for cleanup in [*cleanups, self.stage.close()]:
            try:
                await asyncio.wait_for(cleanup, EPISODE_CLEANUP_TIMEOUT_S)
            except Exception as exc:
                log.warning("episode %s: a context left behind: %r", self.id, exc)

    def _sandbox_state_url(self) -> str | None:
        """Where a sandbox site frees this episode's copy of its databases; None when the task's site is none."""
        site = self.task.site
        return f"{self.settings.site_url(site)}/__webrl/episodes/{self.id}" if site in SITE_PLACEHOLDERS else None

    async def _free_sandbox_state_here(self) -> None:
        """:meth:`_free_sandbox_state` from this process, for an episode whose browser died (a sandbox site keeps an
        episode's copy of its databases until it is deleted: every crashed episode's would stay on disk)."""
        if (url := self._sandbox_state_url()) is not None:
            try:
                async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
                    await client.delete(url)
            except httpx.HTTPError:
                pass  # not a sandbox site, or already gone

    async def _free_sandbox_state(self, context: BrowserContext) -> None:
        if (url := self._sandbox_state_url()) is not None:
            try:
                await context.request.delete(url, timeout=2000)
            except PlaywrightError:
                pass  # not a sandbox site, or already gone
