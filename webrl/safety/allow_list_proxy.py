"""A forward proxy that lets a browser reach the allow-list and nothing else, whatever in it opens the connection.

Chromium launched with :meth:`AllowListProxy.chromium_args` sends every connection it makes for a page through
this proxy, loopback included (``--proxy-bypass-list=<-loopback>`` removes Chromium's implicit loopback bypass):
documents, subresources, fetches, and WebSockets (``ws:`` and ``wss:`` are tunnelled with ``CONNECT``), whether a
page, a frame, a dedicated or shared worker or a service worker opened it. The request routes and the CDP guard
(:mod:`webrl.safety.navigation_guard`) see fetches and page WebSockets only; a worker's WebSocket reaches the network
here and nowhere else in the browser's reach, so here is where it is checked.

Two kinds of request arrive:
- ``CONNECT host:port`` (https, ws, wss): the target is read by :func:`webrl.safety.allow_list.authority` (the same
WHATWG
  reading as the guard's) and, when allowed, tunnelled both ways;
- ``GET http://host:port/path`` (plain http): read by :func:`webrl.safety.allow_list.browser_url`; the request is sent
  on as ``GET /path`` over a connection of its own, its body (``Content-Length`` or chunked) and nothing after it,
  the reply relayed with ``Connection: close``, so no second request can ride a checked connection.
The proxy connects to the host and port as that reading serialized them, so what was checked is what is reached.
WebRTC is kept off UDP (:meth:`AllowListProxy.chromium_args`), so its only way out is TURN over TCP, a ``CONNECT``
here; WebTransport (QUIC) is not carried by an HTTP proxy and Chromium fails it without sending a datagram.
Anything else, and every target off the list, is answered ``403`` (logged, counted in :attr:`refused`), and no
connection to it is opened. Changing :attr:`allowed` (:meth:`set_allowed`) cuts open tunnels it no longer allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Coroutine
from typing import Any

from webrl.safety.allow_list import authority, browser_url, host_allowed

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024  # a request or reply head longer than this is refused
HEAD_TIMEOUT_S = 30.0  # a client that opens a connection and says nothing is dropped after this
CONNECT_TIMEOUT_S = 10.0
CHUNK = 64 * 1024
KEPT_REFUSALS = 1000  # the latest refused targets a proxy remembers (all are logged)
#: Hop-by-hop headers (RFC 9110 section 7.6.1) the proxy drops; it sets its own ``Connection: close``.
HOP_BY_HOP = {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"te", b"trailer",
              b"upgrade"}


class Refused(Exception):
    """A request the proxy answers with an error status instead of forwarding."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why


class AllowListProxy:
    """An HTTP forward proxy on loopback passing only connections to hosts on ``allowed`` (module docstring)."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = list(allowed)
        self.refused: deque[str] = deque(maxlen=KEPT_REFUSALS)  # the latest targets refused, oldest first
        self.server: asyncio.Server | None = None
        self._tunnels: dict[asyncio.Task[None], tuple[str, int]] = {}

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> AllowListProxy:
        self.server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD_BYTES)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None, "start the proxy first"
        return int(self.server.sockets[0].getsockname()[1])

    def chromium_args(self) -> list[str]:
        """Switches that send every connection of a Chromium through this proxy, loopback included, and keep
        WebRTC off UDP (which no HTTP proxy carries: a STUN request would go straight to any host and port)."""
        return [f"--proxy-server=http://127.0.0.1:{self.port}", "--proxy-bypass-list=<-loopback>",
                "--webrtc-ip-handling-policy=disable_non_proxied_udp"]

    def set_allowed(self, allowed: list[str]) -> None:
        """A new allow-list; open connections to hosts it does not allow are cut."""
        self.allowed = list(allowed)
        for task, (host, port) in list(self._tunnels.items()):
            if not host_allowed(host, port, self.allowed):
                task.cancel()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            for task in list(self._tunnels):
                task.cancel()
            await self.server.wait_closed()
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            method, target, headers = _parse_head(head)
            host, port = self._check(target.decode("latin-1"), connect=method == b"CONNECT")
            self._tunnels[task] = (host, port)
            upstream_reader, upstream = await _open(host, port)
            try:
                if method == b"CONNECT":
                    writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    await _pipe_both(reader, writer, upstream_reader, upstream)
                else:
                    await _forward(method, target, headers, reader, writer, upstream_reader, upstream)
            finally:
                upstream.close()
        except Refused as exc:
            with contextlib.suppress(ConnectionError):
                writer.write(f"HTTP/1.1 {exc.status} {exc.why}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                             .encode("latin-1", "replace"))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError,
                ValueError, OSError) as exc:
            log.debug("proxy connection ended: %r", exc)
        except asyncio.CancelledError:
            pass  # cut by set_allowed or close
        finally:
            self._tunnels.pop(task, None)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _check(self, target: str, *, connect: bool) -> tuple[str, int]:
        """``(host, port)`` to connect to for ``target``; raises :class:`Refused` (403 off the list, 400 unread)."""
        if connect:
            found = authority(target)
        else:
            parsed = browser_url(target)
            found = None
            if parsed is not None and parsed.protocol == "http:" and parsed.hostname and not parsed.username:
                found = (parsed.hostname, int(parsed.port) if parsed.port else 80)
        if found is None:
            self._refuse(target, "unreadable target")
            raise Refused(400, "Bad Request")
        if not host_allowed(*found, self.allowed):
            self._refuse(target, f"not on the allow-list {self.allowed}")
            raise Refused(403, "Forbidden")
        return found

    def _refuse(self, target: str, why: str) -> None:
        self.refused.append(target)
        log.info("proxy refused %s (%s)", target, why)


def _parse_head(head: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]]]:
    """Method, target and headers of a request head; raises :class:`Refused` (400) on anything else."""
    lines = head.removesuffix(b"\r\n\r\n").split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise Refused(400, "Bad Request")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise Refused(400, "Bad Request")
        headers.append((name, value.strip()))
    return parts[0], parts[1], headers


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the checked ``host`` (brackets of an IPv6 host removed); 502 when it cannot be made."""
    try:
        return await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), port, limit=MAX_HEAD_BYTES),
                                      CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise Refused(502, "Bad Gateway") from exc


async def _forward(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter, upstream_reader: asyncio.StreamReader,
                   upstream: asyncio.StreamWriter) -> None:
    """One plain-http request in origin form, its body, then the reply (with ``Connection: close``) to EOF."""
    parsed = browser_url(target.decode("latin-1"))
    assert parsed is not None
    path = (parsed.pathname + parsed.search).encode("latin-1")
    kept = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP]
    upstream.write(b"%s %s HTTP/1.1\r\n" % (method, path) + b"".join(b"%s: %s\r\n" % h for h in kept)
                   + b"Connection: close\r\n\r\n")
    names = {n.lower(): v for n, v in headers}
    if b"chunked" in names.get(b"transfer-encoding", b"").lower():
        await _copy_chunked(reader, upstream)
    elif (length := names.get(b"content-length")) is not None:
        await _copy_exactly(reader, upstream, int(length))
    await upstream.drain()
    reply = await upstream_reader.readuntil(b"\r\n\r\n")
    status, *lines = reply.removesuffix(b"\r\n\r\n").split(b"\r\n")
    kept_reply = [line for line in lines if line.partition(b":")[0].strip().lower() not in HOP_BY_HOP]
    writer.write(b"\r\n".join([status, *kept_reply, b"Connection: close"]) + b"\r\n\r\n")
    await _pipe(upstream_reader, writer)


async def _copy_exactly(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int) -> None:
    while length > 0:
        data = await reader.readexactly(min(length, CHUNK))
        writer.write(data)
        await writer.drain()
        length -= len(data)


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chunked body up to and including its last chunk and trailers, nothing after it."""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        writer.write(size_line)
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                writer.write(line)
            writer.write(b"\r\n")
            await writer.drain()
            return
        await _copy_exactly(reader, writer, size + 2)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until ``source`` ends."""
    while data := await source.read(CHUNK):
        sink.write(data)
        await sink.drain()


async def until_either_ends(*pumps: Coroutine[Any, Any, None]) -> None:
    """Run ``pumps`` (the two directions of a relay) until one ends, then cancel the other and wait for it."""
    tasks = [asyncio.ensure_future(pump) for pump in pumps]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _pipe_both(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     upstream_reader: asyncio.StreamReader, upstream: asyncio.StreamWriter) -> None:
    """A tunnel: both directions until either ends."""
    await until_either_ends(_pipe(reader, upstream), _pipe(upstream_reader, writer))
