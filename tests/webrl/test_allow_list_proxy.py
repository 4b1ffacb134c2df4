"""The allow-list proxy on its own (no browser): a real TCP listener on a loopback port stands in for a host; the
proxy tunnels and forwards to it only when it is listed, reads targets as the guard does, and passes nothing after
a checked request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from webrl.safety.allow_list import authority, host_allowed, narrowed
from webrl.safety.allow_list_proxy import AllowListProxy

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the loop the listener fixture runs on


@dataclass
class Listener:
    """A loopback TCP server: its port, what each connection sent, how many connections it took."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)
    connections: int = 0


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    """Answers every connection with a fixed HTTP reply after its first head, and keeps what arrived."""
    found = Listener()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.connections += 1
        data = b""
        try:
            data = await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello")
            await writer.drain()
            data += await asyncio.wait_for(reader.read(1024), 0.3)
        except (asyncio.IncompleteReadError, TimeoutError):
            pass
        found.received.append(data)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


async def _ask(proxy: AllowListProxy, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(request)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    return reply


async def test_a_tunnel_to_an_unlisted_port_is_refused_and_never_opened(listener):
    proxy = await AllowListProxy(["127.0.0.1:1"]).start()
    try:
        reply = await _ask(proxy, f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\n".encode())
        assert reply.startswith(b"HTTP/1.1 403") and listener.connections == 0
        assert list(proxy.refused) == [f"127.0.0.1:{listener.port}"]
        proxy.set_allowed([f"127.0.0.1:{listener.port}"])
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n".encode())
        reply = await asyncio.wait_for(reader.readuntil(b"hello"), 5)
        assert reply.startswith(b"HTTP/1.1 200 Connection Established") and listener.connections == 1
        writer.close()
    finally:
        await proxy.close()


async def test_plain_http_is_forwarded_in_origin_form_with_nothing_after_its_body(listener):
    proxy = await AllowListProxy([f"127.0.0.1:{listener.port}"]).start()
    try:
        smuggled = b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"
        reply = await _ask(proxy, f"POST http://127.0.0.1:{listener.port}/a?b=1 HTTP/1.1\r\nHost: x\r\n"
                           "Proxy-Connection: keep-alive\r\nContent-Length: 4\r\n\r\nbody".encode() + smuggled)
        assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b"hello")
        assert b"Connection: close" in reply and b"keep-alive" not in reply
        [sent] = listener.received
        assert sent.startswith(b"POST /a?b=1 HTTP/1.1\r\n") and sent.endswith(b"\r\n\r\nbody")
        assert b"Proxy-Connection" not in sent and b"Connection: close" in sent
    finally:
        await proxy.close()


@pytest.mark.parametrize("request_line", [
    "CONNECT 127.0.0.1:{port}@127.0.0.1:1 HTTP/1.1",
    "CONNECT user@127.0.0.1:{port} HTTP/1.1",
    "CONNECT 127.0.0.1:{port}/x HTTP/1.1",
    "CONNECT 127.0.0.1 HTTP/1.1",
    "GET /relative HTTP/1.1",
    "GET ftp://127.0.0.1:{port}/ HTTP/1.1",
    "GET http://127.0.0.1:1\\@127.0.0.1:{port}/ HTTP/1.1",  # the browser's reading: port 1
    "GET http://127.0.0.1:{port}/ HTTP/1.1 junk",
])
async def test_targets_read_otherwise_than_host_and_port_are_refused(listener, request_line):
    proxy = await AllowListProxy([f"127.0.0.1:{listener.port}"]).start()
    try:
        reply = await _ask(proxy, request_line.format(port=listener.port).encode() + b"\r\n\r\n")
        assert reply.startswith((b"HTTP/1.1 400", b"HTTP/1.1 403")), reply
        assert listener.connections == 0
    finally:
        await proxy.close()


async def test_a_narrower_list_cuts_an_open_tunnel(listener):
    proxy = await AllowListProxy([f"127.0.0.1:{listener.port}"]).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT 127.0.0.1:{listener.port} HTTP/1.1\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        proxy.set_allowed(["127.0.0.1:1"])
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the proxy closed it
        writer.close()
    finally:
        await proxy.close()


async def test_authority_reads_host_and_port_as_the_browser_does():
    assert authority("127.0.0.1:7770") == ("127.0.0.1", 7770)
    assert authority("EXAMPLE.org:443") == ("example.org", 443)
    assert authority("0x7f.1:80") == ("127.0.0.1", 80)
    assert authority("[::1]:8080") == ("[::1]", 8080)
    for bad in ("127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "a@b:1", "a/b:1", "a\\b:1", ":80", "a:80x", "[::1:80"):
        assert authority(bad) is None, bad


@pytest.mark.parametrize(("requested", "ceiling"), [
    (["a:1", "b", "c", "d:4", "[::1]"], ["a", "b:2", "c", "e", "[::1]:9"]),
    (["A:1 ", "b"], ["a:1", "a:2", "B"]),
    (["evil", "evil:1"], ["a"]),
    ([], ["a", "b:2"]),
])
async def test_a_narrowed_list_allows_exactly_what_both_lists_allow(requested, ceiling):
    """A browser server's list narrowed to a connection's (``narrowed``): never a host or port the server's list
    does not allow, and nothing both allow is lost."""
    kept = narrowed(requested, ceiling)
    for host in ("a", "b", "c", "d", "e", "evil", "[::1]"):
        for port in (1, 2, 4, 9, 80):
            both = host_allowed(host, port, requested) and host_allowed(host, port, ceiling)
            assert host_allowed(host, port, kept) == both, (host, port, kept)
