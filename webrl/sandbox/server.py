"""Serve the sandbox sites: each site a uvicorn server in a background thread of this process.

``running_sandbox(settings, ports=None)`` is a context manager: it builds the template databases (once per
seed), binds a socket per site (port 0 = a free port; default: port 0 for every site), starts the servers
and yields a copy of ``settings`` whose ``<site>_url`` fields point at them, so ``__SHOPPING__`` and friends
resolve to the running sites. ``webrl sites serve`` runs it with ``config.SANDBOX_PORTS``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from webrl.config import Settings
from webrl.errors import bind_or_explain
from webrl.sandbox.site import build_site_app
from webrl.sandbox.sites import SITES, builders
from webrl.sandbox.store import EpisodeStore, sandbox_root

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 20.0  # uvicorn starts in well under a second; this only bounds a hang


def make_store(settings: Settings) -> EpisodeStore:
    """The episode store for ``settings.seed`` under ``settings.home``, templates built."""
    store = EpisodeStore(sandbox_root(settings), settings.seed, builders())
    store.build_all()
    return store


@dataclass
class _Running:
    site: str
    server: uvicorn.Server
    thread: threading.Thread
    sock: socket.socket


def _bind(host: str, site: str, port: int) -> socket.socket:
    """A listening socket for ``site``; :class:`webrl.errors.PortBusy` saying how to serve it elsewhere."""
    fix = (f"is `webrl sites serve` or another demo running? Stop it, or serve the sites elsewhere: "
           f"WEBRL_SITES__{site.upper()}_URL=http://{host}:<free port> (one such setting per site), or "
           "`webrl sites serve --port-offset N`")
    sock = bind_or_explain(host, port, f"sandbox site {site}", fix)
    sock.set_inheritable(True)
    return sock


def _bind_all(host: str, ports: dict[str, int]) -> dict[str, socket.socket]:
    """A socket per site, or none (those bound are closed) when one port is taken."""
    socks: dict[str, socket.socket] = {}
    try:
        for site, port in ports.items():
            socks[site] = _bind(host, site, port)
    except BaseException:
        for sock in socks.values():
            sock.close()
        raise
    return socks


def _start(site: str, sock: socket.socket, store: EpisodeStore, settings: Settings) -> _Running:
    app = build_site_app(site, store, settings)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"sandbox-{site}", daemon=True)
    thread.start()
    return _Running(site, server, thread, sock)


def _wait_started(running: list[_Running]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    for item in running:
        while not item.server.started:
            if not item.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"sandbox site {item.site} did not start")
            time.sleep(0.01)


def sandbox_ports(settings: Settings) -> dict[str, int]:
    """The ports the configured site URLs name, so the sandbox serves exactly where every worker looks."""
    from urllib.parse import urlsplit

    ports = {}
    for site in SITES:
        parts = urlsplit(settings.site_url(site))
        ports[site] = parts.port or (443 if parts.scheme == "https" else 80)
    return ports


def sites_are_local(settings: Settings) -> bool:
    """True when every sandbox site URL points at this machine (so this process may serve them)."""
    from urllib.parse import urlsplit

    return all(urlsplit(settings.site_url(site)).hostname in {"127.0.0.1", "localhost"} for site in SITES)


@contextmanager
def running_sandbox(settings: Settings, ports: dict[str, int] | None = None,
                    sites: list[str] | None = None) -> Iterator[Settings]:
    """Serve ``sites`` (default: all present) and yield settings whose site URLs point at them."""
    names = sites or list(SITES)
    unknown = sorted(set(names) - set(SITES))
    if unknown:
        raise ValueError(f"unknown sandbox sites {unknown}; present: {list(SITES)}")
    host = settings.sites.sandbox_host
    socks = _bind_all(host, {site: (ports or {}).get(site, 0) for site in names})
    urls = {f"{site}_url": f"http://{host}:{sock.getsockname()[1]}" for site, sock in socks.items()}
    served = settings.replace(sites=urls)
    store = make_store(served)
    running = [_start(site, sock, store, served) for site, sock in socks.items()]
    try:
        _wait_started(running)
        log.info("sandbox sites up: %s", {r.site: urls[f"{r.site}_url"] for r in running})
        yield served
    finally:
        for item in running:
            item.server.should_exit = True
        for item in running:
            item.thread.join(timeout=5)
            item.sock.close()

