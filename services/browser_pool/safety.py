"""What a browser context may reach: the host allow-list (rules in :mod:`webrl.safety.allow_list`).

Three fences in the browser, all recorded so the episode can report each block, and under them the browser's
allow-list proxy (:mod:`webrl.safety.allow_list_proxy`, started by ``pool.py``), which takes every connection the
browser makes, whatever opened it (a worker's WebSocket, which none of the three sees), and logs what it refuses:
- request interception (``context.route``) on the first request of anything the page loads: only
  requests to hosts *off* the list are intercepted (the route pattern is a regular expression that
  Playwright matches inside the browser driver), so allowed traffic pays nothing here;
- a :class:`~webrl.safety.navigation_guard.NavigationGuard` on the browser for every hop of every request (documents
  and subresources), which the route never sees after a redirect (a 302 from an allowed site to another host);
  the browser's stock of contexts holds it (``stock.py``: one allow-list per browser at a time) and reports to
  the episode's list;
- WebSocket routing (``context.route_web_socket``) for the sockets a page opens, which neither of the others
  sees (they are not fetches): one to a host off the list is closed before it connects. This is what keeps a
  page from reaching a browser server (``webrl browser serve``) or anything else listening on the machine.
"""

from __future__ import annotations

import logging
import re

from playwright.async_api import BrowserContext, Route, WebSocketRoute

from webrl.safety.allow_list import LOCAL_SCHEMES, is_allowed

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


WS_POLICY_VIOLATION = 1008  # WebSocket close code a blocked socket is closed with (RFC 6455 section 7.4.1)


class AllowList:
    """Installs the allow-list's routes on a context and remembers what they (and the browser's navigation
    guard, :meth:`record_guarded`) blocked."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = list(allowed)
        self.blocked: list[tuple[str, bool]] = []  # (url, was it a navigation)

    async def route(self, context: BrowserContext) -> None:
        """Route the context's requests and WebSockets to hosts off the list here (to be blocked and recorded)."""
        blocked = blocked_url_regex(self.allowed)
        await context.route(blocked, self._handle)
        await context.route_web_socket(blocked, self._handle_web_socket)

    async def _handle(self, route: Route) -> None:
        url = route.request.url
        if is_allowed(url, self.allowed):
            await route.continue_()
            return
        self._record(url, route.request.is_navigation_request())
        log.info("blocked request to %s (not on the allow-list %s)", url, self.allowed)
        await route.abort("blockedbyclient")

    async def _handle_web_socket(self, socket: WebSocketRoute) -> None:
        """Never connected to the server: the page sees the socket close."""
        if is_allowed(socket.url, self.allowed):
            socket.connect_to_server()
            return
        self._record(socket.url, False)
        log.info("blocked WebSocket to %s (not on the allow-list %s)", socket.url, self.allowed)
        await socket.close(code=WS_POLICY_VIOLATION, reason="blocked by the allow-list")

    def _record(self, url: str, is_navigation: bool) -> None:
        self.blocked.append((url, is_navigation))

    def record_guarded(self, url: str, is_document: bool) -> None:
        """A hop the browser's :class:`~webrl.safety.navigation_guard.NavigationGuard` failed (a document's is a
        navigation)."""
        self._record(url, is_document)

    def take_blocked(self) -> list[tuple[str, bool]]:
        """``(url, is_navigation)`` of each request blocked since the last call, each once."""
        out, self.blocked = list(dict.fromkeys(self.blocked)), []
        return out
