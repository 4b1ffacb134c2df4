"""Observation: WebRL's simplified HTML of the active page, from one ``page.evaluate`` of ``observe.js``.

No screenshot, no accessibility tree: the script waits for the DOM to go quiet, marks interactive elements
with integer ids (attribute ``data-webrl-id``, document order, so the same page gives the same ids) and
renders the visible part of the page with only the attributes docs/design.md keeps. ``act.py`` finds an
element again by its mark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from webrl.agent.schemas import Observation

log = logging.getLogger(__name__)

OBSERVE_JS = (Path(__file__).with_name("observe.js")).read_text()
# The episode's init scripts: inflight.js (what the page has in flight), then observe.js defined once per document as
# window.__webrlObserve (read-only), so that an observation sends and compiles a one-line call, not ~20 KB of script
# (bench/observe_call.py: 0.77x per call, measured 2026-11-26, commit caab667). A document without it (no init
# scripts) gets the whole script.
INFLIGHT_JS = (Path(__file__).with_name("inflight.js")).read_text()
INIT_JS = (f"{INFLIGHT_JS}\n;Object.defineProperty(window, '__webrlObserve', "
           f"{{ value: {OBSERVE_JS.strip()}\n, writable: false, configurable: false }});")
CALL_OBSERVE_JS = "(opts) => (typeof window.__webrlObserve === 'function' ? window.__webrlObserve(opts) : null)"
MARK_ATTRIBUTE = "data-webrl-id"  # set by observe.js on each element that has an id

QUIET_MS = 25  # DOM quiet window: no mutation for this long means the page has settled (~1.5 frames at 60 Hz)
FRAME_MS = 16  # the least an observation waits when the page has been quiet long enough: a frame (rAF or this)
QUIET_CAP_MS = 1000  # never wait longer than this for a page that keeps mutating (carousels, clocks)
MEDIA_CAP_MS = 2000  # nor longer than this in all for images, fonts and transitions (a slow image host)
ANIMATION_WAIT_MS = 500  # a transition/animation ending within this is waited for (a menu sliding open)
MAX_TEXT_CHARS = 200  # a text node longer than this is truncated ("..."); keeps observations short
MAX_VALUE_CHARS = 100  # other attribute values (titles, labels) are truncated at this length
MAX_FIELD_CHARS = 1000  # an input's or textarea's value shows this much; Scroll on a textarea shows the rest
MAX_OPTIONS = 50  # options listed per <select>
LEAVE_WAIT_MS = 500  # observe.js waits this long for a page that said it is leaving (a form submitted) to go
LOAD_TIMEOUT_MS = 10_000  # waiting for the load event after an action; past it the page is observed as is
NAVIGATION_RETRIES = 3  # an evaluate interrupted by a navigation is retried after the new page loads


@dataclass(frozen=True)
class SettleRule:
    """What observe.js waits for before it reads the page: DOM quiet at most ``cap_ms``; with media, at
    most ``media_cap_ms`` in all."""

    quiet_ms: int = QUIET_MS
    cap_ms: int = QUIET_CAP_MS
    media_cap_ms: int = MEDIA_CAP_MS
    timers: bool = True  # short page timers pending (inflight.js: debounces, hover delays)
    media: bool = True  # images in the viewport, web fonts, transitions ending within ANIMATION_WAIT_MS
    # the quiet window counts from the page's last DOM mutation (inflight.js), not from the observation's start
    # (plus one frame when frame callbacks are pending): a page that stopped changing is read at once, not 25 ms on
    since_last_mutation: bool = True

    def options(self) -> dict[str, object]:
        return {"quietMs": self.quiet_ms, "capMs": self.cap_ms, "mediaCapMs": self.media_cap_ms,
                "settleTimers": self.timers, "settleMedia": self.media, "animationMs": ANIMATION_WAIT_MS,
                "quietSinceLast": self.since_last_mutation, "frameMs": FRAME_MS,
                "leaveMs": LEAVE_WAIT_MS}


SETTLE = SettleRule()
QUIET_PER_CALL_SETTLE = SettleRule(since_last_mutation=False)  # a full quiet window from every observation's start
DOM_ONLY_SETTLE = SettleRule(timers=False, media=False, since_last_mutation=False)  # the earlier rule: DOM, fetch/XHR


@dataclass(frozen=True)
class ElementInfo:
    """What act.py needs about an element with an id: its tag, its input type, its CSS path (bench only)."""

    tag: str
    type: str = ""
    path: str = ""


ElementMap = dict[str, ElementInfo]


@dataclass
class PageView:
    """An observation together with the ids it shows."""

    observation: Observation
    elements: ElementMap = field(default_factory=dict)
    popups: int = 0  # tabs the page opened since the last observation (inflight.js counts them)
    settle_ms: float = 0.0  # how long observe.js waited for the page to settle
    observe_ms: float = 0.0  # the whole observation: load wait, settling, extraction, tab titles


async def settle(page: Page, timeout_ms: float = LOAD_TIMEOUT_MS) -> None:
    """Wait for the page's load event (event-driven; returns at once when already loaded)."""
    try:
        await page.wait_for_load_state("load", timeout=timeout_ms)
    except PlaywrightError as exc:
        log.info("load state not reached in %d ms on %s: %s", timeout_ms, page.url, exc.message.splitlines()[0])


async def tab_titles(pages: list[Page], known: dict[int, str] | None = None) -> list[str]:
    """One entry per open tab: its title, or its URL when it has none. ``known`` maps ``id(page)`` to a
    title already read (the observed page's), saving a round trip."""
    out = []
    for p in pages:
        title = (known or {}).get(id(p))
        if title is None:
            try:
                title = await p.title()
            except PlaywrightError:
                title = ""
        out.append(title or p.url)
    return out


def _interrupted_by_navigation(exc: PlaywrightError) -> bool:
    message = exc.message
    return "Execution context was destroyed" in message or "navigat" in message.lower()


async def observe_view(page: Page, *, tabs: list[Page] | None = None, error: str | None = None,
                       bbox: bool = False, paths: bool = False, settle_rule: SettleRule = SETTLE,
                       on_stayed: Callable[[Page], Awaitable[None]] | None = None) -> PageView:
    """Settle, then extract the simplified HTML and the id map (and the titles of ``tabs``, default: every
    page of the context). Retries when a navigation interrupts it. A page that said it is leaving and was
    still there after the quick wait (observe.js, step 0) is observed again after ``on_stayed(page)``, which
    waits for its navigation (the episode's navigation requests); without it, at once, as it is."""
    opts = {**settle_rule.options(), "maxText": MAX_TEXT_CHARS, "maxValue": MAX_VALUE_CHARS,
            "maxField": MAX_FIELD_CHARS, "maxOptions": MAX_OPTIONS, "bbox": bbox, "paths": paths}
    last: PlaywrightError | None = None
    started = time.perf_counter()
    for _ in range(NAVIGATION_RETRIES + 1):
        await settle(page)
        try:
            data = await page.evaluate(CALL_OBSERVE_JS, opts)
            if data is None:
                data = await page.evaluate(OBSERVE_JS, opts)
        except PlaywrightError as exc:
            if page.is_closed() or not _interrupted_by_navigation(exc):
                raise
            last = exc  # the page navigated mid-way; observe the new one
            continue
        if data.get("stayed"):
            last = PlaywrightError("the page kept saying it was leaving and did not go")
            if on_stayed is not None:
                await on_stayed(page)
            continue
        elements = {k: ElementInfo(tag=v["tag"], type=v.get("type", ""), path=v.get("path", ""))
                    for k, v in data["elements"].items()}
        pages = tabs if tabs is not None else page.context.pages
        titles = await tab_titles(pages, {id(page): data["title"]})
        obs = Observation(html=data["html"], url=data["url"], title=data["title"], tabs=titles, error=error)
        return PageView(observation=obs, elements=elements, popups=int(data.get("popups", 0)),
                        settle_ms=float(data.get("settleMs", 0.0)), observe_ms=(time.perf_counter() - started) * 1000)
    assert last is not None
    raise last


async def observe(page: Page) -> Observation:
    """WebRL's simplified HTML of ``page`` (element ids in attribute ``id``), its url, title and tabs."""
    return (await observe_view(page)).observation
