"""What a browser context may reach: the host allow-list (rules in :mod:`webrl.allow_list`).

Two fences, both recorded so the episode can report each block:
- request interception (``context.route``) on the first request of anything the page loads: only
  requests to hosts *off* the list are intercepted (the route pattern is a regular expression that
  Playwright matches inside the browser driver), so allowed traffic pays nothing;
- a :class:`~webrl.navigation_guard.NavigationGuard` on the browser for every hop of a navigation, which
  the route never sees after a redirect (a 302 from an allowed site to another host); the browser's stock
  of contexts holds it (``stock.py``: one allow-list per browser at a time) and reports to the episode's list.
"""

from __future__ import annotations

import logging
import re

from playwright.async_api import BrowserContext, Route

from webrl.allow_list import LOCAL_SCHEMES, is_allowed

log = logging.getLogger(__name__)


def _host_pattern(entry: str) -> str:
    """``host:port`` matches exactly; a bare ``host`` matches any port."""
    entry = entry.strip().lower()
    if ":" in entry.rsplit("]", 1)[-1]:
        return re.escape(entry)
    return re.escape(entry) + r"(?::\d+)?"


def blocked_url_regex(allowed: list[str]) -> re.Pattern[str]:
    """A regex matching every http(s)/ws(s) URL whose host is not on ``allowed`` (plus other schemes)."""
    hosts = "|".join(_host_pattern(h) for h in allowed if h.strip()) or r"(?!)"
    local = "|".join(re.escape(s) for s in LOCAL_SCHEMES)
    return re.compile(rf"^(?!(?:{local}))(?!(?:https?|wss?)://(?:[^/@]*@)?(?:{hosts})(?:[/?#]|$))", re.IGNORECASE)


class AllowList:
    """Installs the allow-list's route on a context and remembers what it (and the browser's navigation
    guard, :meth:`record_navigation`) blocked."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = list(allowed)
        self.blocked: list[tuple[str, bool]] = []  # (url, was it a navigation)

    async def route(self, context: BrowserContext) -> None:
        """Route the context's requests to hosts off the list here (to be blocked and recorded)."""
        await context.route(blocked_url_regex(self.allowed), self._handle)

    async def _handle(self, route: Route) -> None:
        url = route.request.url
        if is_allowed(url, self.allowed):
            await route.continue_()
            return
        self._record(url, route.request.is_navigation_request())
        log.info("blocked request to %s (not on the allow-list %s)", url, self.allowed)
        await route.abort("blockedbyclient")

    def _record(self, url: str, is_navigation: bool) -> None:
        self.blocked.append((url, is_navigation))

    def record_navigation(self, url: str) -> None:
        """A navigation hop the browser's :class:`~webrl.navigation_guard.NavigationGuard` failed."""
        self._record(url, True)

    def take_blocked(self) -> list[tuple[str, bool]]:
        """``(url, is_navigation)`` of each request blocked since the last call, each once."""
        out, self.blocked = list(dict.fromkeys(self.blocked)), []
        return out
