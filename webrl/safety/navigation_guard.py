"""Every hop of every request checked against the allow-list, redirects included.

Playwright's request routing (``context.route``) sees only the first request of a redirect chain: its
Chromium network manager continues redirected requests itself, so a 302 from an allowed site to any other
host would load, a document as well as an image, script, stylesheet, fetch or XHR (whose reply the page then
reads when the other host allows CORS). The guard intercepts every request through the Chrome DevTools
Protocol, where ``Fetch.requestPaused`` reports every hop (a redirect's hop carries ``redirectedRequestId``)
before it is sent, and fails those to hosts off the list with ``BlockedByClient``: the request never leaves the
browser, and a blocked document shows Chromium's "blocked" error page.

Each request costs one round trip to this process before it is sent (``bench/reset_floor.py``'s navigation-guard
layer measures it; docs/security.md has the numbers). WebSockets are not fetches and never pause here: the
allow-list's WebSocket route covers a page's (``services/browser_pool/safety.py``), the browser's allow-list proxy
(:mod:`webrl.safety.allow_list_proxy`) every one, a worker's included.

A guard on a browser (:meth:`NavigationGuard.on_browser`) watches every page of that browser, popups, workers and
cross-site iframes included; one on a page (:meth:`NavigationGuard.on_page`) watches that page alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from playwright.async_api import Browser, CDPSession, Page
from playwright.async_api import Error as PlaywrightError

from webrl.safety.allow_list import is_allowed

log = logging.getLogger(__name__)

#: What the guard pauses: every request (every hop of it), before it is sent.
ALL_REQUESTS = [{"urlPattern": "*", "requestStage": "Request"}]

#: Hears of each blocked hop: its URL, and whether it was a document (a navigation of a tab or frame).
OnBlock = Callable[[str, bool], None]


class NavigationGuard:
    """Fails requests to hosts off ``allowed`` at every hop; ``on_block(url, is_document)`` hears of each one."""

    def __init__(self, session: CDPSession, allowed: list[str], on_block: OnBlock | None) -> None:
        self.session, self.allowed, self.on_block = session, list(allowed), on_block

    @classmethod
    async def on_browser(cls, browser: Browser, allowed: list[str],
                         on_block: OnBlock | None = None) -> NavigationGuard:
        """A guard over every page of ``browser`` (the browser pool runs one episode per browser)."""
        return await cls(await browser.new_browser_cdp_session(), allowed, on_block)._enable()

    @classmethod
    async def on_page(cls, page: Page, allowed: list[str],
                      on_block: OnBlock | None = None) -> NavigationGuard:
        """A guard over ``page`` alone; attach it before the page navigates."""
        return await cls(await page.context.new_cdp_session(page), allowed, on_block)._enable()

    async def _enable(self) -> NavigationGuard:
        self.session.on("Fetch.requestPaused", self._paused)
        await self.session.send("Fetch.enable", {"patterns": ALL_REQUESTS})
        return self

    async def _paused(self, event: dict[str, Any]) -> None:
        url = event["request"]["url"]
        request_id = event["requestId"]
        try:
            if is_allowed(url, self.allowed):
                await self.session.send("Fetch.continueRequest", {"requestId": request_id})
                return
            is_document = event.get("resourceType") == "Document"
            log.info("blocked %s to %s (not on the allow-list %s)", "navigation" if is_document else "request", url,
                     self.allowed)
            if self.on_block is not None:
                self.on_block(url, is_document)
            await self.session.send("Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"})
        except PlaywrightError as exc:  # the request was cancelled, or its page or browser went away
            log.debug("navigation guard could not answer for %s: %s", url, exc.message)

    async def detach(self) -> None:
        """Stop guarding. Safe on a dead browser."""
        try:
            await self.session.detach()
        except PlaywrightError as exc:
            log.debug("navigation guard detach: %s", exc.message)
