"""The pool on a browser server (``WEBRL_BROWSER__CDP_URL``, :mod:`webrl.serving.browser_server`): Chromium in another
process, reached over CDP, observes as a launched one does, keeps the allow-list's every-hop guard, is replaced
when it dies, and ends with its connection; the server starts no more than ``max_browsers``."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from playwright.async_api import Error as PlaywrightError

from services.browser_pool.episode import BrowserEpisode
from services.browser_pool.pool import BrowserPool
from webrl.config import Settings
from webrl.serving.browser_server import BrowserServer, UnguardedBrowserServer, start

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


@pytest.fixture(scope="session")
async def browser_server(pool_settings: Settings) -> AsyncIterator[tuple[str, BrowserServer]]:
    server, browsers = await start("127.0.0.1", 0, pool_settings.browser.chromium_path, max_browsers=4,
                                   allowed=pool_settings.host_allow_list())
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"ws://127.0.0.1:{port}/", browsers


@pytest.fixture(scope="session")
def remote_settings(pool_settings: Settings, browser_server: tuple[str, BrowserServer]) -> Settings:
    return pool_settings.replace(browser={"cdp_url": browser_server[0]})


async def _until(condition: object, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_the_server_runs_chromium_with_playwrights_own_switches(browser_server):
    command = browser_server[1].command
    assert {"--headless", "--hide-scrollbars", "--no-sandbox", "--disable-popup-blocking"} <= set(command)
    assert not any(arg.startswith(("--remote-debugging-pipe", "--user-data-dir")) for arg in command)


async def test_a_remote_browser_observes_as_a_launched_one(pool, pool_settings, remote_settings, fixture_url,
                                                           make_task):
    task = make_task(f"{fixture_url}/actions.html")
    observations = []
    async with BrowserPool(remote_settings, size=1) as remote:
        assert remote.browser_pids() == []  # nothing runs here: the browser is the server's
        for own, settings in ((pool, pool_settings), (remote, remote_settings)):
            episode = await BrowserEpisode.open(own, task, settings)
            try:
                observations.append(episode.observation.html)
            finally:
                await episode.close()
    assert "Add one" in observations[1] and observations[0] == observations[1]


async def test_a_remote_browser_blocks_redirects_off_the_allow_list(remote_settings, fixture_url, outside, make_task):
    target = f"{outside.url}/outside.html"
    outside.paths.clear()
    async with BrowserPool(remote_settings, size=1) as remote:
        episode = await BrowserEpisode.open(remote, make_task(f"{fixture_url}/redirect?to={quote(target)}"),
                                            remote_settings)
        try:
            assert "You reached the outside host" not in episode.observation.html
            assert f"blocked navigation to {target}" in (episode.observation.error or "")
        finally:
            await episode.close()
    assert outside.paths == []


async def test_a_dead_remote_browser_is_replaced_and_a_closed_connection_ends_it(browser_server, remote_settings,
                                                                                 fixture_url, make_task):
    browsers = browser_server[1].browsers
    async with BrowserPool(remote_settings, size=1) as remote:
        await _until(lambda: len(browsers) == 1)
        [dead] = browsers
        os.killpg(dead.pid, signal.SIGKILL)
        await _until(lambda: dead not in browsers and not remote.slots[0].alive)  # the pool heard it died
        episode = await BrowserEpisode.open(remote, make_task(f"{fixture_url}/actions.html"), remote_settings)
        try:
            assert "Add one" in episode.observation.html
        finally:
            await episode.close()
        assert remote.restarts == 1 and len(browsers) == 1
    await _until(lambda: not browsers)


async def test_the_server_starts_no_more_than_max_browsers(browser_server, remote_settings):
    server = browser_server[1]
    limit, server.max_browsers = server.max_browsers, 0
    try:
        with pytest.raises(PlaywrightError):
            async with BrowserPool(remote_settings, size=1):
                pass
    finally:
        server.max_browsers = limit
    assert not server.browsers


async def test_handshakes_arriving_together_start_no_more_than_max_browsers(browser_server):
    """Each handshake counts the browsers the others are still starting: five at once with room for one start one."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from webrl.serving.browser_server import TRY_AGAIN_LATER

    url, server = browser_server
    limit, server.max_browsers = server.max_browsers, 1
    peak, closed = 0, []

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(server.browsers))
            await asyncio.sleep(0.01)

    async def knock() -> None:
        try:
            async with connect(url, open_timeout=30) as ws:
                await asyncio.wait_for(ws.recv(), 3)
        except ConnectionClosed as exc:
            closed.append(exc.rcvd.code if exc.rcvd else None)
        except TimeoutError:
            pass  # the one admitted: its browser waits for CDP messages

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.gather(*(knock() for _ in range(5)))
    finally:
        watcher.cancel()
        server.max_browsers = limit
    assert peak == 1 and closed.count(TRY_AGAIN_LATER) == 4, (peak, closed)
    await _until(lambda: not server.browsers and not server.starting)


async def test_webrl_browser_serve_drains_on_sigterm(pool_settings, fixture_url, make_task, tmp_path):
    """The chromium pod's command: on SIGTERM it takes no new connection, keeps serving the browsers in use,
    and exits once they are closed."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "serve.log").open("w")
    env = os.environ | {"WEBRL_SECURITY__ALLOWED_HOSTS": ",".join(pool_settings.host_allow_list())}  # its browsers'
    proc = subprocess.Popen([sys.executable, "-m", "webrl.cli", "browser", "serve", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        settings = pool_settings.replace(browser={"cdp_url": f"ws://127.0.0.1:{port}/"})
        for _ in range(600):
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.1)
        async with BrowserPool(settings, size=1) as remote:
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(1.0)
            with pytest.raises(PlaywrightError):
                async with BrowserPool(settings, size=1):
                    pass
            episode = await BrowserEpisode.open(remote, make_task(f"{fixture_url}/actions.html"), settings)
            try:
                assert "Add one" in episode.observation.html
            finally:
                await episode.close()
            assert proc.poll() is None
        await _until(lambda: proc.poll() is not None)
        assert proc.returncode == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("opener", ["page", "worker"])
async def test_a_page_cannot_drive_the_browser_server(browser_server, remote_settings, fixture_url, make_task,
                                                      opener):
    """A page the pool opened on an allowed origin opens ``ws://127.0.0.1:PORT/`` to the very server its browser
    runs on and asks it for CDP targets. The page's own socket is closed by the allow-list's WebSocket route; a
    worker's, which that route does not see, by the browser's allow-list proxy (the server's port is not on the
    server's list); the server would refuse either for its Origin (the test below): no CDP answer, no browser
    started."""
    server = browser_server[1]
    page = f"{fixture_url}/subresources.html?ws={quote(browser_server[0])}&in={opener}"
    async with BrowserPool(remote_settings, size=1) as remote:
        await _until(lambda: len(server.browsers) == 1)
        episode = await BrowserEpisode.open(remote, make_task(page), remote_settings)
        try:
            await episode.active.wait_for_function("/socket: (closed|said)/.test(document.body.innerText)")
            await asyncio.sleep(0.5)  # a CDP answer would come now
            html = (await episode.refresh()).observation.html
        finally:
            await episode.close()
        assert "socket: closed" in html and "said" not in html, html
        assert len(server.browsers) == 1  # the pool's own browser only


async def test_a_handshake_with_a_web_pages_origin_is_refused(browser_server):
    """What a page's or worker's socket would send if it got through: an ``Origin`` header, refused with 403 before
    a browser starts."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    url, server = browser_server
    refused, running = server.refused, len(server.browsers)
    with pytest.raises(InvalidStatus, match="403"):
        async with connect(url, origin="http://127.0.0.1:7770"):  # type: ignore[arg-type]
            pass
    assert server.refused == refused + 1 and len(server.browsers) == running


async def test_a_server_with_a_credential_admits_only_the_pool_that_sends_it(pool_settings, fixture_url, make_task):
    server, browsers = await start("127.0.0.1", 0, pool_settings.browser.chromium_path, max_browsers=2,
                                   token="s3cret-token", allowed=pool_settings.host_allow_list())
    url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    async with server:
        for token in (None, "wrong"):
            with pytest.raises(PlaywrightError):
                async with BrowserPool(pool_settings.replace(browser={"cdp_url": url, "cdp_token": token}), size=1):
                    pass
        assert browsers.refused == 2 and not browsers.browsers
        settings = pool_settings.replace(browser={"cdp_url": url, "cdp_token": "s3cret-token"})
        async with BrowserPool(settings, size=1) as remote:
            episode = await BrowserEpisode.open(remote, make_task(f"{fixture_url}/actions.html"), settings)
            try:
                assert "Add one" in episode.observation.html
            finally:
                await episode.close()


async def test_webrl_browser_serve_refuses_a_network_address_without_a_credential(tmp_path):
    """Off loopback anyone who reaches the port drives a browser: no credential, no server (the command exits at
    once, naming the setting; :func:`start` raises)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "WEBRL_BROWSER__CDP_TOKEN"} | {"WEBRL_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "webrl.cli", "browser", "serve", "--host", "0.0.0.0", "--port", "0"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0
    assert "without a credential" in done.stderr and "WEBRL_BROWSER__CDP_TOKEN" in done.stderr, done.stderr
    with pytest.raises(UnguardedBrowserServer):
        await start("0.0.0.0", 0, "/nonexistent/chromium", max_browsers=1, allowed=[])


async def test_a_remote_workers_web_socket_reaches_only_the_servers_allow_list(browser_server, remote_settings,
                                                                               fixture_url, socket_listener,
                                                                               make_task):
    """A worker's WebSocket in a browser on the server, to a loopback port off the server's list: the proxy the
    server started for that browser refuses it, and the listener is never reached. Control: with the port on the
    server's list (and the episode's), it connects."""
    url, asked = socket_listener
    server = browser_server[1]
    page = f"{fixture_url}/subresources.html?ws={quote(url)}&in=worker"
    async with BrowserPool(remote_settings, size=1) as remote:
        episode = await BrowserEpisode.open(remote, make_task(page), remote_settings)
        try:
            await episode.active.wait_for_function("/socket: (closed|said)/.test(document.body.innerText)")
            html = (await episode.refresh()).observation.html
        finally:
            await episode.close()
        assert "socket: closed" in html and "said" not in html, html
        assert any(url.split("//")[1].rstrip("/") in target for proxy in server.proxies for target in proxy.refused)
    assert asked == []
    host = url.split("//")[1].rstrip("/")
    listed = remote_settings.replace(security={"allowed_hosts": [*remote_settings.security.allowed_hosts, host]})
    server.allowed = [*server.allowed, host]
    try:
        async with BrowserPool(listed, size=1) as remote:  # a new connection: a browser with the longer list
            episode = await BrowserEpisode.open(remote, make_task(page), listed)
            try:
                await episode.active.wait_for_function("document.body.innerText.includes('socket: said')")
            finally:
                await episode.close()
    finally:
        server.allowed = server.allowed[:-1]
    assert asked == ["/"]


async def test_a_remote_browser_reaches_only_what_both_the_server_and_the_episode_list(
        browser_server, remote_settings, fixture_url, socket_listener, make_task):
    """The pool names the episode's allow-list when it connects; the server's proxy for that browser takes the
    intersection with the server's own list. A worker's WebSocket (which no in-browser fence sees) to a loopback
    port on the server's list but off the episode's never connects; nor does one on the episode's list but off the
    server's (the episode cannot widen the server's list); on both, it connects."""
    url, asked = socket_listener
    host = url.split("//")[1].rstrip("/")
    server = browser_server[1]
    page = f"{fixture_url}/subresources.html?ws={quote(url)}&in=worker"
    episode_lists = remote_settings.replace(security={"allowed_hosts": [*remote_settings.security.allowed_hosts, host]})

    async def worker_socket(settings: Settings, pool_settings: Settings | None = None) -> tuple[str, list[str]]:
        """The page's text and what the server's proxies refused, with the episode open."""
        async with BrowserPool(pool_settings or settings, size=1) as remote:
            episode = await BrowserEpisode.open(remote, make_task(page), settings)
            try:
                await episode.active.wait_for_function("/socket: (closed|said)/.test(document.body.innerText)")
                html = (await episode.refresh()).observation.html
                return html, [target for proxy in server.proxies for target in proxy.refused]
            finally:
                await episode.close()

    server.allowed = [*server.allowed, host]
    try:
        # the server and the pool list the port, the episode does not: the pool connects anew with its list
        html, refused = await worker_socket(remote_settings, pool_settings=episode_lists)
        assert "socket: closed" in html and "said" not in html, html
        assert asked == [] and any(host in target for target in refused), refused
    finally:
        server.allowed = server.allowed[:-1]
    html, refused = await worker_socket(episode_lists)  # the episode lists it, the server does not
    assert "socket: closed" in html and "said" not in html and asked == [], html
    assert any(host in target for target in refused), refused
    server.allowed = [*server.allowed, host]
    try:
        assert "socket: said" in (await worker_socket(episode_lists))[0]  # both list it
    finally:
        server.allowed = server.allowed[:-1]
    assert asked == ["/"]


def test_webrl_browser_serve_on_a_taken_port_says_so_in_one_line(tmp_path):
    """A port another process listens on (or an address this machine lacks) is a one-line error naming it and the
    fix, before any Chromium starts (it was asyncio's traceback)."""
    import socket
    import subprocess
    import sys

    env = dict(os.environ) | {"WEBRL_HOME": str(tmp_path)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "webrl.cli", "browser", "serve", "--port", str(port)], env=env,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert f"port {port} on 127.0.0.1 for the browser server is in use" in done.stderr, done.stderr
