"""What a browser context may reach: the host allow-list, enforced by request interception.

Only requests to hosts *off* the list are intercepted (the route pattern is a regular expression that
Playwright matches inside the browser driver), so allowed traffic pays nothing. Intercepted requests are
checked again in Python and aborted; each block is recorded so the episode can report it.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit

from playwright.async_api import BrowserContext, Route

log = logging.getLogger(__name__)

#: Schemes that never leave the browser.
LOCAL_SCHEMES = ("data:", "blob:", "about:", "chrome-error:", "javascript:")


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


def is_allowed(url: str, allowed: list[str]) -> bool:
    """The authoritative check: is ``url``'s host (or host:port) on the allow-list?"""
    if url.startswith(LOCAL_SCHEMES):
        return True
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "ws", "wss"):
        return False
    try:
        port = parts.port
    except ValueError:  # "host:7770.evil.com" and other malformed ports
        return False
    netloc = (parts.hostname or "") + (f":{port}" if port else "")
    wanted = {h.strip().lower() for h in allowed}
    return netloc.lower() in wanted or (parts.hostname or "").lower() in wanted


class AllowList:
    """Installs the allow-list on a context and remembers what it blocked."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = list(allowed)
        self.blocked: list[tuple[str, bool]] = []  # (url, was it a navigation)

    async def install(self, context: BrowserContext) -> None:
        await context.route(blocked_url_regex(self.allowed), self._handle)

    async def _handle(self, route: Route) -> None:
        url = route.request.url
        if is_allowed(url, self.allowed):
            await route.continue_()
            return
        self.blocked.append((url, route.request.is_navigation_request()))
        log.info("blocked request to %s (not on the allow-list %s)", url, self.allowed)
        await route.abort("blockedbyclient")

    def take_blocked(self) -> list[tuple[str, bool]]:
        """``(url, is_navigation)`` of each request blocked since the last call."""
        out, self.blocked = self.blocked, []
        return out
