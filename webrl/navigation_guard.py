"""Every hop of a navigation checked against the allow-list, redirects included.

Playwright's request routing (``context.route``) sees only the first request of a redirect chain: its
Chromium network manager continues redirected requests itself, so a 302 from an allowed site to any other
host would load. The guard intercepts document requests (main frames and iframes) through the Chrome
DevTools Protocol, where ``Fetch.requestPaused`` reports every hop (a redirect's hop carries
``redirectedRequestId``) before it is sent, and fails those to hosts off the list with ``BlockedByClient``:
the request never leaves the browser and the page shows Chromium's "blocked" error page.

Documents only: they are what an agent can steer (links, forms, typed URLs). A page's own subresources
(scripts, images, fetch) are not paused in Python, which would slow every page load; their first hop is
still checked by the route.

A guard on a browser (:meth:`NavigationGuard.on_browser`) watches every page of that browser, popups and
cross-site iframes included; one on a page (:meth:`NavigationGuard.on_page`) watches that page alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from playwright.async_api import Browser, CDPSession, Page
from playwright.async_api import Error as PlaywrightError

from webrl.allow_list import is_allowed

log = logging.getLogger(__name__)

#: What the guard pauses: document requests (every navigation hop), before they are sent.
DOCUMENT_REQUESTS = [{"urlPattern": "*", "resourceType": "Document", "requestStage": "Request"}]


class NavigationGuard:
    """Fails navigations to hosts off ``allowed`` at every hop; ``on_block(url)`` hears of each one."""

    def __init__(self, session: CDPSession, allowed: list[str], on_block: Callable[[str], None] | None) -> None:
        self.session, self.allowed, self.on_block = session, list(allowed), on_block

    @classmethod
    async def on_browser(cls, browser: Browser, allowed: list[str],
                         on_block: Callable[[str], None] | None = None) -> NavigationGuard:
        """A guard over every page of ``browser`` (the browser pool runs one episode per browser)."""
        return await cls(await browser.new_browser_cdp_session(), allowed, on_block)._enable()

    @classmethod
    async def on_page(cls, page: Page, allowed: list[str],
                      on_block: Callable[[str], None] | None = None) -> NavigationGuard:
        """A guard over ``page`` alone; attach it before the page navigates."""
        return await cls(await page.context.new_cdp_session(page), allowed, on_block)._enable()

    async def _enable(self) -> NavigationGuard:
        self.session.on("Fetch.requestPaused", self._paused)
        await self.session.send("Fetch.enable", {"patterns": DOCUMENT_REQUESTS})
        return self

    async def _paused(self, event: dict[str, Any]) -> None:
        url = event["request"]["url"]
        request_id = event["requestId"]
        try:
            if is_allowed(url, self.allowed):
                await self.session.send("Fetch.continueRequest", {"requestId": request_id})
                return
            log.info("blocked navigation to %s (not on the allow-list %s)", url, self.allowed)
            if self.on_block is not None:
                self.on_block(url)
            await self.session.send("Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"})
        except PlaywrightError as exc:  # the request was cancelled, or its page or browser went away
            log.debug("navigation guard could not answer for %s: %s", url, exc.message)

    async def detach(self) -> None:
        """Stop guarding. Safe on a dead browser."""
        try:
            await self.session.detach()
        except PlaywrightError as exc:
            log.debug("navigation guard detach: %s", exc.message)
