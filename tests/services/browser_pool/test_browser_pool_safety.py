"""Safety: the allow-list blocks an outside host, popups become the active tab, downloads and dialogs are
handled, and a killed browser ends its episode with an error and is replaced."""

from __future__ import annotations

import os
import re
import signal
from urllib.parse import quote

import pytest

from services.browser_pool.episode import BrowserEpisode, StartUrlRefused
from services.browser_pool.pool import BrowserPool
from services.browser_pool.runs import run_episode
from services.browser_pool.safety import blocked_url_regex
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.safety.allow_list import is_allowed

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


def _listing(settings, host: str):  # type: ignore[no-untyped-def]
    """``settings`` with ``host`` (``host:port``) added to the allow-list: each test's control."""
    return settings.replace(security={"allowed_hosts": [*settings.security.allowed_hosts, host]})


async def _page_once(pool, task, settings, ready: str) -> str:  # type: ignore[no-untyped-def]
    """Open an episode of ``task``, wait until ``ready`` (a JS expression) holds on its page, and return the
    observation's HTML then; the episode is closed either way."""
    episode = await BrowserEpisode.open(pool, task, settings)
    try:
        await episode.active.wait_for_function(ready)
        return (await episode.refresh()).observation.html
    finally:
        await episode.close()


def _id(html: str, text: str) -> str:
    match = re.search(rf'<\w+ id="(\d+)"[^>]*> {re.escape(text)}', html)
    assert match, f"no element {text!r} in {html}"
    return match.group(1)


async def test_allow_list_rules():
    allowed = ["127.0.0.1:7770", "example.org"]
    regex = blocked_url_regex(allowed)
    for url in ["http://127.0.0.1:7770/x", "http://127.0.0.1:7770", "https://example.org:8443/a?b", "data:text/html,x",
                "about:blank", "http://EXAMPLE.org/"]:
        assert is_allowed(url, allowed) and not regex.search(url), url
    for url in ["http://127.0.0.1:7771/", "http://127.0.0.1/", "http://evil.com/?u=http://127.0.0.1:7770/",
                "http://127.0.0.1:7770.evil.com/", "http://example.org.evil.com/", "ftp://example.org/", "file:///etc"]:
        assert not is_allowed(url, allowed) and regex.search(url), url


async def test_outside_host_is_blocked(pool, pool_settings, fixture_url, outside_url, make_task):
    target = f"{outside_url}/outside.html"
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/safety.html?to={target}"), pool_settings)
    try:
        await episode.refresh()
        assert "fetch failed" in episode.observation.html  # the page's own fetch to the outside host
        result = await episode.step(f'do(action="Click", element="{_id(episode.observation.html, "Outside link")}")')
        assert "You reached the outside host" not in result.observation.html
        assert result.observation.error and f"blocked navigation to {target}" in result.observation.error
    finally:
        await episode.close()


async def test_outside_host_reachable_when_allowed(pool, pool_settings, fixture_url, outside_url, make_task):
    """The control for the test above: the same page reaches the host once it is on the list."""
    target = f"{outside_url}/outside.html"
    settings = _listing(pool_settings, outside_url.split("//")[1])
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/safety.html?to={target}"), settings)
    try:
        await episode.refresh()
        assert "fetch ok" in episode.observation.html
        result = await episode.step(f'do(action="Click", element="{_id(episode.observation.html, "Outside link")}")')
        assert "You reached the outside host" in result.observation.html
    finally:
        await episode.close()


async def test_redirect_off_the_allow_list_is_blocked(pool, pool_settings, fixture_url, outside, make_task):
    """A 302 from the allowed host to an unlisted port, as the start URL and behind a clicked link: the
    request never leaves the browser and the observation says so. Control: with the port listed, it loads."""
    target = f"{outside.url}/outside.html"
    away = f"{fixture_url}/redirect?to={quote(target)}"
    outside.paths.clear()
    episode = await BrowserEpisode.open(pool, make_task(away), pool_settings)
    try:
        assert "You reached the outside host" not in episode.observation.html
        assert f"blocked navigation to {target}" in (episode.observation.error or "")
    finally:
        await episode.close()
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/away.html?to={quote(away)}"), pool_settings)
    try:
        result = await episode.step(f'do(action="Click", element="{_id(episode.observation.html, "Away link")}")')
        assert "You reached the outside host" not in result.observation.html
        assert f"blocked navigation to {target}" in (result.observation.error or "")
    finally:
        await episode.close()
    assert outside.paths == []
    listed = _listing(pool_settings, outside.url.split("//")[1])
    episode = await BrowserEpisode.open(pool, make_task(away), listed)
    try:
        assert "You reached the outside host" in episode.observation.html and episode.observation.error is None
    finally:
        await episode.close()


@pytest.mark.parametrize("url", ["chrome://version", "data:text/html,<h1>hi</h1>", "javascript:alert(1)",
                                 "file:///etc/passwd", "about:blank", "http://[::1", "http://127.0.0.1:1/"])
async def test_start_urls_off_http_or_the_allow_list_are_refused(pool, pool_settings, make_task, url):
    free = pool.slots[0].episodes
    with pytest.raises(StartUrlRefused, match=r"start_url: .*(not an http|not a valid URL|not on the allow-list)"):
        await BrowserEpisode.open(pool, make_task(url), pool_settings)
    assert pool.slots[0].episodes == free  # refused before a browser was leased


async def test_a_rollout_on_a_refused_start_url_records_why(pool, pool_settings, make_task):
    """The episode loop (runs.py) keeps the refusal as the trajectory's stop reason; the batch goes on."""
    traj = await run_episode(make_task("file:///etc/passwd"), _NeverAsked(), pool, pool_settings)
    assert traj.stop_reason == "start_url_refused" and traj.steps == []


class _NeverAsked:
    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        raise AssertionError("a refused episode never asks the policy")


async def test_popups_downloads_dialogs(pool, pool_settings, fixture_url, make_task):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/safety.html"), pool_settings)
    try:
        html = episode.observation.html
        result = await episode.step(f'do(action="Click", element="{_id(html, "New tab link")}")')
        assert result.observation.title == "Next page" and len(result.observation.tabs) == 2
        assert "new tab" in (result.observation.error or "")
        await episode.active.close()
        view = await episode.refresh()
        assert view.observation.title == "Safety fixture" and len(view.observation.tabs) == 1
        result = await episode.step(f'do(action="Click", element="{_id(html, "Open popup")}")')
        assert result.observation.title == "Next page" and len(result.observation.tabs) == 2
        await episode.active.close()
        await episode.refresh()
        result = await episode.step(f'do(action="Click", element="{_id(html, "Download file")}")')
        assert result.observation.title == "Safety fixture"
        result = await episode.step(f'do(action="Click", element="{_id(html, "Ask")}")')
        assert "confirmed" in result.observation.html and "dialog" in (result.observation.error or "")
    finally:
        await episode.close()


class _ClickForever:
    """Clicks the first element every step (killing the browser after the first step)."""

    def __init__(self, pool: BrowserPool) -> None:
        self.pool, self.calls = pool, 0

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        self.calls += 1
        if self.calls == 2:
            for pid in self.pool.browser_pids():
                os.kill(pid, signal.SIGKILL)
        return [PolicyResponse(response=f'do(action="Scroll Down")  # {self.calls}'.split("#")[0])
                for _ in requests]


async def test_killed_browser_is_replaced(pool_settings, fixture_url, make_task):
    async with BrowserPool(pool_settings, size=1) as own:
        [pid] = own.browser_pids()
        traj = await run_episode(make_task(f"{fixture_url}/actions.html"), _ClickForever(own), own, pool_settings)
        assert traj.stop_reason == "browser_crashed"
        assert traj.steps and traj.steps[-1].done and "died" in (traj.steps[-1].error or "")
        # The next episode gets a fresh browser and works.
        episode = await BrowserEpisode.open(own, make_task(f"{fixture_url}/actions.html"), pool_settings)
        try:
            assert "Add one" in episode.observation.html
        finally:
            await episode.close()
        assert own.restarts == 1 and own.browser_pids() and own.browser_pids()[0] != pid


async def test_subresources_redirected_off_the_allow_list_are_blocked(pool, pool_settings, fixture_url, outside,
                                                                     make_task):
    """An image, script, stylesheet, fetch and XHR that the allowed host redirects (302) to an unlisted port:
    no hop reaches it and the page reads nothing. Control: with the port listed, every one arrives."""
    page = f"{fixture_url}/subresources.html?to={quote(outside.url)}"
    outside.paths.clear()
    episode = await BrowserEpisode.open(pool, make_task(page), pool_settings)
    try:
        html = episode.observation.html
        assert "img: failed" in html and "fetch: failed" in html and "xhr: failed" in html, html
    finally:
        await episode.close()
    assert outside.paths == []
    listed = _listing(pool_settings, outside.url.split("//")[1])
    episode = await BrowserEpisode.open(pool, make_task(page), listed)
    try:
        assert "fetch: read" in episode.observation.html and "xhr: read" in episode.observation.html
    finally:
        await episode.close()
    assert {"/style.css", "/script.js", "/pixel.svg", "/outside.html"} <= set(outside.paths)


async def test_a_web_socket_off_the_allow_list_is_closed_before_it_connects(pool, pool_settings, fixture_url,
                                                                           socket_listener, make_task):
    url, asked = socket_listener
    page = f"{fixture_url}/subresources.html?ws={quote(url)}"
    episode = await BrowserEpisode.open(pool, make_task(page), pool_settings)
    try:
        await episode.active.wait_for_function("!document.body.innerText.includes('socket: waiting')")
        view = await episode.refresh()
        assert "socket: closed" in view.observation.html, view.observation.html
    finally:
        await episode.close()
    assert asked == []
    listed = _listing(pool_settings, url.split("//")[1].rstrip("/"))
    episode = await BrowserEpisode.open(pool, make_task(page), listed)  # the control: listed, it connects
    try:
        await episode.active.wait_for_function("document.body.innerText.includes('socket: said')")
    finally:
        await episode.close()
    assert asked == ["/"]


@pytest.mark.parametrize("opener", ["worker", "shared", "service"])
async def test_a_workers_web_socket_off_the_allow_list_never_connects(pool, pool_settings, fixture_url,
                                                                     socket_listener, make_task, opener):
    """A dedicated, shared or service worker's WebSocket, which the page's WebSocket route never sees: the browser's
    allow-list proxy refuses its tunnel, so the listener on the unlisted port is never reached. Control: listed,
    it connects."""
    url, asked = socket_listener
    page = f"{fixture_url}/subresources.html?ws={quote(url)}&in={opener}"
    settled = "/socket: (closed|said)/.test(document.body.innerText)"
    html = await _page_once(pool, make_task(page), pool_settings, settled)
    assert "socket: closed" in html and "said" not in html
    assert asked == []
    proxy = pool.slots[0].proxy
    assert proxy is not None and url.split("//")[1].rstrip("/") in proxy.refused  # the fence that held
    listed = _listing(pool_settings, url.split("//")[1].rstrip("/"))
    await _page_once(pool, make_task(page), listed, "document.body.innerText.includes('socket: said')")
    assert asked == ["/"]


async def test_a_workers_fetch_and_xhr_off_the_allow_list_are_blocked(pool, pool_settings, fixture_url, outside,
                                                                      make_task):
    """A worker's own fetch and XHR to an unlisted port fail and never arrive; listed, both read the page."""
    page = f"{fixture_url}/subresources.html?wto={quote(outside.url)}"
    outside.paths.clear()
    settled = "!/(fetch|xhr): waiting/.test(document.body.innerText)"
    html = await _page_once(pool, make_task(page), pool_settings, settled)
    assert "fetch: failed" in html and "xhr: failed" in html, html
    assert outside.paths == []
    html = await _page_once(pool, make_task(page), _listing(pool_settings, outside.url.split("//")[1]), settled)
    assert "fetch: read" in html and "xhr: read" in html, html


async def test_webrtc_sends_no_datagram_to_an_unlisted_port(pool, pool_settings, fixture_url, make_task):
    """A page's WebRTC asks a STUN server on a loopback UDP port: no HTTP proxy carries UDP, so the browser is
    kept off it, and the port receives nothing (ICE gathering completes without it)."""
    import asyncio

    received: list[bytes] = []

    class _Count(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            received.append(data)

    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(_Count, local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    try:
        episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/subresources.html?stun=127.0.0.1:{port}"),
                                            pool_settings)
        try:
            await episode.active.wait_for_function("document.body.innerText.includes('rtc: gathered')")
        finally:
            await episode.close()
    finally:
        transport.close()
    assert received == []


class _KillOnce:
    """Scrolls every step; on its second call kills every browser of the pool, once."""

    def __init__(self, pool: BrowserPool) -> None:
        self.pool, self.calls, self.killed = pool, 0, False

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        self.calls += 1
        if self.calls == 2 and not self.killed:
            self.killed = True
            for pid in self.pool.browser_pids():
                os.kill(pid, signal.SIGKILL)
        return [PolicyResponse(response='do(action="Scroll Down")') for _ in requests]


async def test_an_episode_a_crashed_browser_ended_runs_again_and_only_its_last_run_is_heard(
        pool_settings, fixture_url, make_task):
    from services.browser_pool.runs import run_batch

    heard = []

    async def hear(index: int, traj) -> None:
        heard.append((index, traj.stop_reason))

    async with BrowserPool(pool_settings, size=1) as own:
        [traj] = await run_batch([make_task(f"{fixture_url}/actions.html")], _KillOnce(own), own, pool_settings,
                                 concurrency=1, max_steps=3, on_trajectory=hear)
        assert own.restarts == 1  # the first run's browser died ...
    assert traj.stop_reason != "browser_crashed" and len(traj.steps) == 3  # ... and the second ran to the horizon
    assert heard == [(0, traj.stop_reason)]  # the crashed run was never handed on to be stored


async def test_an_episode_whose_site_did_not_answer_runs_again_once_it_is_back(pool_settings, make_task,
                                                                                monkeypatch):
    """A start URL that does not open (a sites container restarting) is the machinery's failure, not the agent's:
    the episode runs again after a pause, and only when the site never comes back is it stored, as
    ``site_unreachable`` with no step (not as the agent acting on the browser's error page)."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from services.browser_pool import runs

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><title>Back</title><body><button>Go</button></body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there now
    host = f"127.0.0.1:{port}"
    settings = pool_settings.replace(security={"allowed_hosts": [*pool_settings.security.allowed_hosts, host]})
    task = make_task(f"http://{host}/")
    servers: list[ThreadingHTTPServer] = []

    async def stays_down(retry: int) -> None:
        pass

    async def comes_back(retry: int) -> None:  # the site is up again by the run again
        server = ThreadingHTTPServer(("127.0.0.1", port), Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)

    class Scroll:
        async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
            return [PolicyResponse(response='do(action="Scroll Down")') for _ in requests]

    heard = []

    async def hear(index: int, traj) -> None:
        heard.append(traj.stop_reason)

    async with BrowserPool(settings, size=1) as own:
        monkeypatch.setattr(runs, "_wait_for_site", stays_down)
        [down] = await runs.run_batch([task], Scroll(), own, settings, concurrency=1, max_steps=2, on_trajectory=hear)
        assert down.stop_reason == "site_unreachable" and down.steps == [] and heard == ["site_unreachable"]
        monkeypatch.setattr(runs, "_wait_for_site", comes_back)
        try:
            [back] = await runs.run_batch([task], Scroll(), own, settings, concurrency=1, max_steps=2)
        finally:
            for server in servers:
                server.shutdown()
    assert len(servers) == 1 and back.stop_reason == "max_steps" and len(back.steps) == 2
    assert "Back" in back.steps[0].observation.html or back.steps[0].observation.title == "Back"
