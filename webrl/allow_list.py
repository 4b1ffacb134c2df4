"""The allow-list rules: which URLs a browser may load, which may start an episode, and which model
endpoints a request may send a service to.

An entry is ``host:port`` (that port only) or a bare ``host`` (any port); hosts compare case-insensitively.
The browser pool enforces these rules in the browser (``services/browser_pool/safety.py``,
:mod:`webrl.navigation_guard`); the actor and the pool check start URLs with :func:`start_url_problem`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

#: Schemes that never leave the browser (a page's own data: images, blob: downloads, error pages).
LOCAL_SCHEMES = ("data:", "blob:", "about:", "chrome-error:", "javascript:")
#: The only schemes an episode may start on: chrome://, file:, data: and javascript: pages are refused.
START_SCHEMES = ("http", "https")


def is_allowed(url: str, allowed: list[str]) -> bool:
    """May a page load ``url``? Local schemes yes; http(s)/ws(s) when the host (or host:port) is listed."""
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


def start_url_problem(url: str, allowed: list[str]) -> str | None:
    """Why ``url`` may not start an episode, or None when it may (an http(s) URL on the allow-list)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        return f"{url!r} is not a valid URL"
    if parts.scheme not in START_SCHEMES or not parts.hostname:
        return f"{url!r} is not an http(s) URL"
    if not is_allowed(url, allowed):
        return f"host {parts.netloc} is not on the allow-list {allowed}"
    return None


def first_refused(urls: list[str], allowed: list[str]) -> str | None:
    """Why the first of ``urls`` that may not start an episode may not, naming it; None when all may."""
    for url in urls:
        if problem := start_url_problem(url, allowed):
            return problem if url in problem else f"{url}: {problem}"
    return None


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port spelled out), lower-case; "" when it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return ""
    if parts.scheme not in START_SCHEMES or not parts.hostname:
        return ""
    return f"{parts.scheme}://{parts.hostname}:{port}".lower()


def endpoint_problem(url: str, endpoints: list[str]) -> str | None:
    """Why a request may not send a service to ``url``, or None when it may (same origin as one of
    ``endpoints``, the configured ones: ``Settings.endpoint_allow_list``)."""
    wanted = origin(url)
    if not wanted:
        return f"{url!r} is not an http(s) URL"
    if wanted not in {origin(e) for e in endpoints}:
        return (f"{url!r} is not a configured endpoint (configured: {sorted(set(map(origin, endpoints)))}; "
                "add it to WEBRL_SECURITY__ALLOWED_ENDPOINTS)")
    return None
