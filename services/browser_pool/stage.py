"""A stage: one browser context made ready for an episode (allow-list route, init scripts, one blank tab),
and the scrub that makes a used one ready again.

Reuse is only ever of a stage whose episode stayed on one origin (every document of every tab and frame).
The scrub then leaves nothing of that episode for the next one to see:
- other tabs (popups) closed; the kept tab sent to ``about:blank`` (its unload handlers run first, so what
  they write is cleared below) with dialogs accepted;
- every cookie of the context; the origin's localStorage, IndexedDB, Cache Storage, service workers and
  other quota-managed storage (CDP ``Storage.clearDataForOrigin``); the HTTP cache; the permissions and the
  geolocation override, when the episode's task set them (nothing else can: pages only ask);
- sessionStorage lives in the tab, not the context, and only a document of its origin can clear it: the
  scrub marks it (:data:`STALE_SESSION_KEY`) while the page is still on its origin, and the init script
  :data:`SESSION_RESET_JS` clears a marked sessionStorage before the next episode's first script runs;
- history: reset at scrub and again right after the next episode's first navigation
  (CDP ``Page.resetNavigationHistory``), so Go Backward never reaches the previous episode (a page's own
  scripts may still see ``history.length`` 2 while it loads, as on a new tab, and on a loaded machine now and
  then at the episode's first action: the counter, not an entry of the previous episode).
A stage that visited several origins, crashed, lost its tab or whose scrub fails is closed instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from playwright.async_api import Browser, BrowserContext, CDPSession, Dialog, Page, Request
from playwright.async_api import Error as PlaywrightError

from services.browser_pool.observe import INIT_JS
from services.browser_pool.safety import AllowList
from webrl.safety.allow_list import origin

log = logging.getLogger(__name__)

VIEWPORT = {"width": 1280, "height": 720}  # WebArena's viewport (browser_env default)
STALE_SESSION_KEY = "__webrl_stale_session__"  # sessionStorage marker set by the scrub, cleared on next use
SESSION_RESET_JS = (f"(() => {{ try {{ if (sessionStorage.getItem({STALE_SESSION_KEY!r}) !== null) "
                    "sessionStorage.clear(); } catch (e) {} })();")
MARK_SESSION_JS = f"() => {{ try {{ sessionStorage.setItem({STALE_SESSION_KEY!r}, '1'); }} catch (e) {{}} }}"
SCRUB_TIMEOUT_S = 10.0  # a scrub that takes longer (a wedged page) closes the context instead
MAX_EPISODES_PER_STAGE = 50  # a context is closed after this many episodes: bounds what a long-lived renderer keeps

Cleanup = Callable[[BrowserContext], Awaitable[None]]


@dataclass
class Stage:
    """A context and its first tab, ready for an episode. ``origin`` is where the tab's renderer last was
    ("" for a fresh stage); ``origins`` every origin a document of this context loaded since the last scrub."""

    context: BrowserContext
    page: Page
    cdp: CDPSession
    allow: AllowList
    origin: str = ""
    episodes: int = 0
    origins: set[str] = field(default_factory=set)
    dedicated: bool = False  # made with context options of one task (a storage_state with localStorage)
    frozen: bool = False  # its tab's scripts are stopped (given back, waiting for its scrub)
    overrides: bool = False  # the episode granted permissions or set a geolocation (the scrub takes them back)

    @property
    def reused(self) -> bool:
        return self.episodes > 0

    def _on_request(self, request: Request) -> None:
        if request.resource_type == "document":
            self._note(request.url)

    def _note(self, url: str) -> None:
        if found := origin(url):
            self.origins.add(found)

    async def begin(self) -> None:
        """Ready the stage for an episode: no blocked requests of a previous one reported."""
        self.allow.take_blocked()

    async def after_first_navigation(self) -> None:
        """Drop the ``about:blank`` entry under the episode's first page (a new tab's, or the one a scrubbed
        tab was left on), so that Go Backward at the start goes nowhere. Best effort: a tab whose session
        cannot be renewed keeps that entry (nothing of an earlier episode is in it)."""
        try:
            await self.send("Page.resetNavigationHistory")
        except PlaywrightError as exc:
            log.info("could not reset the history of a new episode's tab: %s", exc.message.splitlines()[0])

    async def freeze(self) -> None:
        """Stop the tab's scripts until the scrub (CDP ``Emulation.setScriptExecutionDisabled``: its timers and
        handlers no longer run), so a page left as its episode ended does nothing while the next episode
        resets. (``Page.setWebLifecycleState`` "frozen" does not stop a visible tab's timers: checked on
        Chromium 156.) Best effort: a tab that cannot be frozen runs on until the scrub stops it."""
        try:
            await self.send("Emulation.setScriptExecutionDisabled", {"value": True})
            self.frozen = True
        except PlaywrightError as exc:
            log.info("could not freeze a given-back tab: %s", exc.message.splitlines()[0])

    async def thaw(self) -> None:
        """Let the tab's scripts run again (the scrub's own scripts and unload handlers need them)."""
        if self.frozen:
            await self.send("Emulation.setScriptExecutionDisabled", {"value": False})
            self.frozen = False

    async def send(self, method: str, params: dict | None = None) -> dict:
        """A CDP command to the tab; once more on a new session when the tab's session went away (a
        navigation to Chromium's error page swaps the tab's renderer and can take the session with it)."""
        try:
            return await self.cdp.send(method, params)
        except PlaywrightError as exc:
            if "Not attached" not in exc.message and "closed" not in exc.message:
                raise
            self.cdp = await self.context.new_cdp_session(self.page)
            return await self.cdp.send(method, params)

    async def close(self) -> None:
        try:
            await self.context.close()
        except PlaywrightError as exc:  # its browser died or is closing: the context is gone either way
            log.debug("closing a stage: %s", exc.message)


async def new_stage(browser: Browser, allowed: list[str], **options: object) -> Stage:
    """A fresh context on ``browser`` with the allow-list route, the init scripts and one blank tab.
    ``options`` are extra context options (a task's ``storage_state``)."""
    context = await browser.new_context(viewport=VIEWPORT, accept_downloads=False, **options)  # type: ignore[arg-type]
    try:
        allow = AllowList(allowed)
        await allow.route(context)
        await context.add_init_script(INIT_JS)
        await context.add_init_script(SESSION_RESET_JS)
        page = await context.new_page()
        stage = Stage(context, page, await context.new_cdp_session(page), allow, dedicated=bool(options))
    except BaseException:
        await context.close()
        raise
    context.on("request", stage._on_request)
    return stage


async def scrub(stage: Stage, cleanup: Cleanup | None = None) -> bool:
    """Make a used stage ready for another episode (module docstring). ``cleanup`` runs once the pages stopped
    (a sandbox site's episode state is freed there), whatever happens. True when the stage may be reused;
    False when it was closed instead."""
    reusable = await _guarded(_stop(stage))
    if cleanup is not None:
        await _guarded(cleanup(stage.context))
    if reusable:
        reusable = await _guarded(_clear(stage))
    if not reusable:
        await stage.close()
    return reusable


async def _guarded(step: Awaitable[bool | None]) -> bool:
    """Run one part of a scrub within SCRUB_TIMEOUT_S; False when it failed or gave up."""
    try:
        return await asyncio.wait_for(step, SCRUB_TIMEOUT_S) is not False
    except (PlaywrightError, TimeoutError) as exc:
        log.info("scrub step failed, the context will be closed: %r", exc)
        return False


async def _accept(dialog: Dialog) -> None:
    try:
        await dialog.accept()
    except PlaywrightError:
        pass  # its page went away


async def _stop(stage: Stage) -> bool:
    """Stop every script of the episode: popups closed, the tab on ``about:blank``. False when the stage is
    not reusable (it is left as it is, to be closed)."""
    page, context = stage.page, stage.context
    if page.is_closed() or stage.episodes + 1 >= MAX_EPISODES_PER_STAGE:
        return False
    await stage.thaw()
    for p in context.pages:
        p.on("dialog", _accept)
        for frame in p.frames:
            stage._note(frame.url)
    here = origin(page.url)
    if stage.origins - {here} or (stage.origins and not here):
        return False  # several origins (or the tab is on an error page): their tab storage cannot all be marked
    if here:
        await page.evaluate(MARK_SESSION_JS)
    for p in context.pages:
        if p is not page:
            await p.close()
    await page.goto("about:blank")
    page.remove_listener("dialog", _accept)
    stage.origin = here or stage.origin
    return True


async def _clear(stage: Stage) -> None:
    """Clear what the context keeps (module docstring) once nothing of the episode runs any more; the
    calls are independent, so they go out together."""
    context = stage.context
    await stage.send("Page.resetNavigationHistory")  # first and alone: it renews a session that went away
    overrides = (context.clear_permissions(), context.set_geolocation(None)) if stage.overrides else ()
    await asyncio.gather(
        context.clear_cookies(),
        *(stage.send("Storage.clearDataForOrigin", {"origin": seen, "storageTypes": "all"}) for seen in stage.origins),
        stage.send("Network.clearBrowserCache"),
        *overrides,
    )
    stage.origins.clear()
    stage.overrides = False
    stage.episodes += 1
