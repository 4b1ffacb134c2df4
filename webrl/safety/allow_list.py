"""The allow-list rules: which URLs a browser may load, which may start an episode, and which model
endpoints a request may send a service to.

An entry is ``host:port`` (that port only) or a bare ``host`` (any port); hosts compare case-insensitively.
The browser pool enforces these rules in the browser (``services/browser_pool/safety.py``,
:mod:`webrl.safety.navigation_guard`) and under it, on every connection the browser makes
(:mod:`webrl.safety.allow_list_proxy`, which reads ``CONNECT`` targets with :func:`authority`); the actor and the pool
check start URLs with :func:`start_url_problem`.

Browser URLs are read as Chromium reads them, by the WHATWG URL Standard (:func:`browser_url`, the Ada parser):
Python's ``urlsplit`` reads ``http://127.0.0.1:18999\\@127.0.0.1:7770/`` as host 127.0.0.1 port 7770, Chromium
(where a backslash is a slash) as port 18999, so a check by ``urlsplit`` passed a start URL the browser then took
elsewhere. The start-URL check and the in-browser guard share this one reading, and the pool opens the URL as
serialized by it (:func:`canonical_start_url`), so what was checked is what loads.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ada_url import URL

#: Schemes that never leave the browser (a page's own data: images, blob: downloads, error pages).
LOCAL_SCHEMES = ("data:", "blob:", "about:", "chrome-error:", "javascript:")
#: The only schemes an episode may start on: chrome://, file:, data: and javascript: pages are refused.
START_SCHEMES = ("http", "https")


#: The port a URL without one goes to, per scheme (WHATWG serializes a default port away).
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def browser_url(url: str) -> URL | None:
    """``url`` parsed as Chromium parses it (WHATWG URL Standard), or None when the browser would not load it."""
    try:
        return URL(url)
    except ValueError:
        return None


def is_allowed(url: str, allowed: list[str]) -> bool:
    """May a page load ``url``? Local schemes yes; http(s)/ws(s) when the host (or host:port) is listed."""
    parsed = browser_url(url)
    if parsed is None:
        return False
    scheme = parsed.protocol.removesuffix(":")
    if f"{scheme}:" in LOCAL_SCHEMES:
        return True
    if scheme not in DEFAULT_PORTS or not parsed.hostname:
        return False
    return host_allowed(parsed.hostname, int(parsed.port) if parsed.port else DEFAULT_PORTS[scheme], allowed)


def host_allowed(host: str, port: int, allowed: list[str]) -> bool:
    """Is ``host`` (as :func:`browser_url` serializes it: lower-case, IPv6 in brackets) on ``allowed`` at ``port``?"""
    wanted = {h.strip().lower() for h in allowed}
    return f"{host.lower()}:{port}" in wanted or host.lower() in wanted


def _entry(entry: str) -> tuple[str, int | None]:
    """An allow-list entry as ``(host, port)``, port None for a bare host (any port)."""
    head, sep, port = entry.rpartition(":")
    if sep and head and port.isdigit():
        return head, int(port)
    return entry, None


def narrowed(requested: list[str], ceiling: list[str]) -> list[str]:
    """The hosts both ``requested`` and ``ceiling`` allow, as entries (never a host:port that ``ceiling`` does not
    allow): a browser server's list narrowed to an episode's. A bare host on one list and ``host:port`` on the other
    give ``host:port``; a bare host on both stays bare."""
    bound = [c.strip().lower() for c in ceiling if c.strip()]
    kept: list[str] = []
    for entry in (r.strip().lower() for r in requested if r.strip()):
        host, port = _entry(entry)
        if port is not None:
            kept += [entry] if host_allowed(host, port, bound) else []
        elif host in bound:
            kept.append(host)
        else:
            kept += [c for c in bound if _entry(c)[0] == host and _entry(c)[1] is not None]
    return list(dict.fromkeys(kept))


def authority(target: str) -> tuple[str, int] | None:
    """``host:port`` (a proxy's ``CONNECT`` target) read as Chromium reads a URL's host, or None unless it is
    exactly a host and a port (no user, path, query or fragment): ``(host, port)``, IPv6 hosts in brackets."""
    head, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or any(c in head for c in "/\\@?#"):
        return None
    parsed = browser_url(f"http://{target}/")
    if parsed is None or not parsed.hostname or parsed.href != f"http://{parsed.host}/":
        return None
    return parsed.hostname, int(port)


def start_url_problem(url: str, allowed: list[str]) -> str | None:
    """Why ``url`` may not start an episode, or None when it may (an http(s) URL on the allow-list, its host
    as the browser reads it)."""
    parsed = browser_url(url)
    if parsed is None:
        return f"{url!r} is not a valid URL"
    if parsed.protocol.removesuffix(":") not in START_SCHEMES or not parsed.hostname:
        return f"{url!r} is not an http(s) URL"
    if not is_allowed(parsed.href, allowed):
        return f"host {parsed.host} is not on the allow-list {allowed} (the browser reads {url!r} as {parsed.href})"
    return None


def canonical_start_url(url: str) -> str:
    """``url`` as the browser reads it (call after :func:`start_url_problem` found none): the pool opens this
    serialization, so no second reading of the raw text can differ from the checked one."""
    parsed = browser_url(url)
    if parsed is None:
        raise ValueError(f"{url!r} is not a valid URL")
    return parsed.href


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
    ``endpoints``, the configured ones: ``Settings.endpoint_allow_list``).

    The URL is read as the browser's URLs are (:func:`browser_url`) and as :func:`origin` reads it; user info or a
    backslash (which the two read differently: ``http://127.0.0.1:1\\@actor:8102``) has no honest use in a base
    URL and is refused, and so is any URL the two readings take to different servers."""
    parsed = browser_url(url.strip())
    if parsed is None or parsed.protocol.removesuffix(":") not in START_SCHEMES or not parsed.hostname:
        return f"{url!r} is not an http(s) URL"
    if "\\" in url or parsed.username or parsed.password:
        return f"{_masked(url, parsed)!r} carries user info or a backslash; give the endpoint as scheme://host:port/path"
    wanted = origin(url)
    if wanted != _whatwg_origin(parsed):
        return f"{url!r} is read as two different servers ({wanted or 'none'} and {_whatwg_origin(parsed)})"
    if wanted not in {origin(e) for e in endpoints}:
        return (f"{url!r} is not a configured endpoint (configured: {sorted(set(map(origin, endpoints)))}; "
                "add it to WEBRL_SECURITY__ALLOWED_ENDPOINTS)")
    return None


def _whatwg_origin(parsed: URL) -> str:
    """:func:`origin`'s spelling of a WHATWG-parsed http(s) URL (IPv6 hosts without brackets)."""
    scheme = parsed.protocol.removesuffix(":")
    port = int(parsed.port) if parsed.port else DEFAULT_PORTS[scheme]
    return f"{scheme}://{parsed.hostname.strip('[]')}:{port}".lower()


def _masked(url: str, parsed: URL) -> str:
    """``url`` for an error message: as given, or (when it carries a password) its href with the password masked."""
    if not parsed.password:
        return url
    masked = URL(parsed.href)
    masked.password = "***"
    return masked.href
