"""Chromium in a process (a pod) of its own, driven over the Chrome DevTools Protocol: ``webrl browser serve``.

Each WebSocket connection to the server gets a fresh Chromium with a throw-away profile, and the connection relays
CDP between the client and that browser's DevTools endpoint; when either side closes, the browser (its whole
process group) and its profile go. The browser pool connects with Playwright's ``connect_over_cdp`` when
``WEBRL_BROWSER__CDP_URL`` names a server (services/browser_pool/pool.py), so Chromium, which runs whatever the
pages send it, can live where neither the pool's secrets nor its network are: on Kubernetes the ``chromium`` pod
holds no secret, no service account token, and may reach only the sites (k8s/base/chromium.yaml).

The browser is started with the switches Playwright itself launches it with (read off one Playwright launch
when the server starts, :func:`playwright_command`), so a remote browser renders and behaves as a launched one.

Whoever holds a connection drives a browser, and a browser reads files (``file:``) and reaches whatever its
machine reaches, so a handshake is admitted (:meth:`BrowserServer.admit`) before any browser starts only when
- it carries no ``Origin`` header: a web page's WebSocket always does (a page in one of these very browsers
  opening ``ws://127.0.0.1:PORT/``, which in a pod no NetworkPolicy polices), CDP clients (Playwright) send none;
- with a credential (``browser.cdp_token``), it carries ``Authorization: Bearer <token>``.
Off loopback the server will not start without a credential (:func:`start`). ``max_browsers`` bounds what
admitted connections can start.

Each browser sends all its traffic, loopback included, through an allow-list proxy of its own
(:class:`~webrl.safety.allow_list_proxy.AllowListProxy`). Its list is the one the connection names in
:data:`ALLOWED_HOSTS_HEADER` (the pool sends its episode's list) narrowed to the server's allow-list
(``webrl browser serve`` takes ``WEBRL_SECURITY__ALLOWED_HOSTS``, else the configured sites): a connection can
narrow the list, never widen it; one that names none gets the server's. So what the pool's in-browser fences do
not see (a worker's WebSocket) reaches only hosts on both lists, never this server's port nor the browsers' DevTools
ports unless the server lists them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
import shutil
import signal
import tempfile
import uuid

import psutil
from websockets.asyncio.client import connect
from websockets.asyncio.connection import Connection
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from webrl.errors import UserError
from webrl.safety.allow_list import narrowed
from webrl.safety.allow_list_proxy import AllowListProxy, until_either_ends
from webrl.serving.factory import is_loopback

log = logging.getLogger(__name__)

#: Switches the pool adds to Playwright's own when it launches Chromium (and the server, through the launch it
#: copies the command line of).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = 60.0  # a cold Chromium start takes 1-2 s; this only bounds a hang
DEVTOOLS_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")
#: Switches of Playwright's launch that belong to that launch only: its pipe, its profile, the marker.
OWN_SWITCHES = ("--remote-debugging-pipe", "--user-data-dir=", "--webrl-browser-server=")
TRY_AGAIN_LATER = 1013  # WebSocket close code: the server is at max_browsers
#: The handshake header a client names its browser's allow-list in (entries separated by commas); the browser gets
#: the part of it the server's own list allows (:func:`~webrl.safety.allow_list.narrowed`).
ALLOWED_HOSTS_HEADER = "X-WebRL-Allowed-Hosts"


async def playwright_command(chromium_path: str) -> list[str]:
    """The command line Playwright launches ``chromium_path`` with (headless, :data:`CHROMIUM_ARGS`), read off a
    real launch, without the switches that tie it to that launch (:data:`OWN_SWITCHES`)."""
    from playwright.async_api import async_playwright

    marker = f"--webrl-browser-server={uuid.uuid4().hex[:12]}"
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path, args=[*CHROMIUM_ARGS, marker],
                                                   headless=True)
        try:
            command = next(proc.info["cmdline"] for proc in psutil.process_iter(["cmdline"])
                           if marker in (proc.info["cmdline"] or [])
                           and not any(arg.startswith("--type=") for arg in proc.info["cmdline"]))
        finally:
            await browser.close()
    return [arg for arg in command if not arg.startswith(OWN_SWITCHES)]


class UnguardedBrowserServer(UserError):
    """A browser server asked to listen off loopback without a credential."""


class BrowserServer:
    """Serves :meth:`handle`: one fresh Chromium per admitted connection (:meth:`admit`), at most ``max_browsers``
    at once, each reaching only what ``allowed`` and the connection's own list allow (through a proxy of its own)."""

    def __init__(self, command: list[str], max_browsers: int, token: str | None = None, *,
                 allowed: list[str]) -> None:
        self.command, self.max_browsers, self.token = list(command), max_browsers, token
        self.allowed = list(allowed)
        self.proxies: set[AllowListProxy] = set()  # one per running browser (tests read what they refused)
        self.browsers: set[asyncio.subprocess.Process] = set()  # running now (tests and logs count them)
        self.starting = 0  # browsers being started (their slots are taken)
        self.refused = 0  # handshakes refused by :meth:`admit` (tests and logs count them)

    def admit(self, connection: ServerConnection, request: Request) -> Response | None:
        """None to go on with the handshake; a 403 for a web page (an ``Origin`` header), a 401 without the
        credential the server has. Runs before :meth:`handle`, so a refused connection starts no browser."""
        if request.headers.get("Origin") is not None:
            return self._refuse(connection, 403, f"a web page ({request.headers['Origin']}) may not drive a browser")
        if self.token is not None and not _bearer_matches(request.headers.get("Authorization"), self.token):
            return self._refuse(connection, 401, "no valid credential (Authorization: Bearer WEBRL_BROWSER__CDP_TOKEN)")
        return None

    def allowed_for(self, request: Request | None) -> list[str]:
        """The list a connection's browser reaches: the one its handshake names (:data:`ALLOWED_HOSTS_HEADER`)
        narrowed to the server's, or the server's when it names none."""
        named = request.headers.get_all(ALLOWED_HOSTS_HEADER) if request is not None else []
        if not named:
            return list(self.allowed)
        return narrowed([entry for value in named for entry in value.split(",")], self.allowed)

    def _refuse(self, connection: ServerConnection, status: int, why: str) -> Response:
        self.refused += 1
        log.warning("refused a connection from %s: %s", connection.remote_address, why)
        return connection.respond(status, why + "\n")

    async def handle(self, client: ServerConnection) -> None:
        # the slot is taken before the first await: handshakes arriving together each count the others' browsers
        # while those start, so no more than max_browsers ever run
        if len(self.browsers) + self.starting >= self.max_browsers:
            await client.close(TRY_AGAIN_LATER, f"{self.max_browsers} browsers running")
            return
        self.starting += 1
        try:
            proxy = await AllowListProxy(self.allowed_for(client.request)).start()
            self.proxies.add(proxy)
            profile = tempfile.mkdtemp(prefix="webrl-chromium-")
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self.command, *proxy.chromium_args(), f"--user-data-dir={profile}",
                    "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE, start_new_session=True)
            except BaseException:
                await self._close_proxy(proxy)
                shutil.rmtree(profile, ignore_errors=True)
                raise
            self.browsers.add(proc)
        finally:
            self.starting -= 1
        assert proc.stderr is not None
        drain: asyncio.Task[None] | None = None
        try:
            endpoint = await asyncio.wait_for(_devtools_endpoint(proc.stderr), START_TIMEOUT_S)
            drain = asyncio.ensure_future(_drain(proc.stderr))
            log.info("browser %d for %s reaching %s (%d running)", proc.pid, client.remote_address, proxy.allowed,
                     len(self.browsers))
            async with connect(endpoint, max_size=None, ping_interval=None, compression=None) as browser:
                await _relay(client, browser)
        finally:
            self.browsers.discard(proc)
            await _kill(proc)
            if drain is not None:
                drain.cancel()
            shutil.rmtree(profile, ignore_errors=True)
            await self._close_proxy(proxy)
            log.info("browser %d closed (%d running)", proc.pid, len(self.browsers))

    async def _close_proxy(self, proxy: AllowListProxy) -> None:
        self.proxies.discard(proxy)
        await proxy.close()


def _bearer_matches(header: str | None, token: str) -> bool:
    """Constant-time comparison of an ``Authorization`` header with ``Bearer <token>``."""
    return hmac.compare_digest((header or "").encode(), f"Bearer {token}".encode())


async def _devtools_endpoint(stderr: asyncio.StreamReader) -> str:
    """The browser's DevTools WebSocket URL, which it prints on stderr once it listens."""
    while line := await stderr.readline():
        if match := DEVTOOLS_LISTENING.search(line):
            return match.group(1).decode()
    raise RuntimeError("chromium exited before its DevTools endpoint was up")


async def _drain(stream: asyncio.StreamReader) -> None:
    """The rest of the browser's stderr, into the log (a full pipe would stall the browser)."""
    while line := await stream.readline():
        log.debug("chromium: %s", line.decode(errors="replace").rstrip())


async def _relay(client: Connection, browser: Connection) -> None:
    """Copy messages both ways until either side closes."""

    async def pump(source: Connection, sink: Connection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in source:
                await sink.send(message)

    await until_either_ends(pump(client, browser), pump(browser, client))


async def _kill(proc: asyncio.subprocess.Process) -> None:
    """The browser and every process it started (its own session, hence process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def unguarded_bind_problem(host: str, token: str | None) -> str | None:
    """Why a browser server may not listen on ``host``, or None: off loopback anyone who reaches the address
    would drive a browser, so it needs a credential there (there is no opting out, unlike the services)."""
    if token or is_loopback(host):
        return None
    return (f"refusing to serve browsers on {host} without a credential: set WEBRL_BROWSER__CDP_TOKEN (e.g. "
            "`openssl rand -hex 32`) here and in the browser pool, or listen on 127.0.0.1")


async def start(host: str, port: int, chromium_path: str, max_browsers: int, token: str | None = None, *,
                allowed: list[str]) -> tuple[Server, BrowserServer]:
    """A listening browser server (``port`` 0: any free port, see ``server.sockets``); ``token``: the credential
    a connection must carry; ``allowed``: the most its browsers may reach (a connection may name a narrower list,
    :data:`ALLOWED_HOSTS_HEADER`). Raises :class:`UnguardedBrowserServer` off loopback without a credential."""
    if problem := unguarded_bind_problem(host, token):
        raise UnguardedBrowserServer(problem)
    browsers = BrowserServer(await playwright_command(chromium_path), max_browsers, token or None, allowed=allowed)
    server = await serve(browsers.handle, host, port, process_request=browsers.admit, max_size=None,
                         compression=None)
    return server, browsers


async def run(host: str, port: int, chromium_path: str, max_browsers: int, token: str | None = None, *,
              allowed: list[str]) -> None:
    """Serve until SIGTERM or SIGINT (``webrl browser serve``), then drain: take no new connection and wait for
    the open ones (browsers in use) to close, which a pod's termination grace period bounds."""
    server, browsers = await start(host, port, chromium_path, max_browsers, token, allowed=allowed)
    log.info("browser server on %s:%d (at most %d browsers, reaching only %s)", host, port, max_browsers, allowed)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    log.info("draining: %d browsers in use", len(browsers.browsers))
    server.close(close_connections=False)
    await server.wait_closed()
