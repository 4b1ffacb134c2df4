"""Fixtures for the browser pool: the local HTML fixtures served on free ports, settings that allow only
them, and one pool (one real Chromium) shared by the test session."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest

from services.browser_pool.pool import BrowserPool
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings

FIXTURES = Path(__file__).with_name("fixtures")
SLOW_PAGE_DELAY_S = 0.3  # /slow.html answers after this long: actions must wait for it, not race it
HANG_PAGE_DELAY_S = 4.0  # /hang.html answers after this long: longer than the timeout tests allow a step
DELAYED_PREFIX = "/delayed/"  # /delayed/<file> serves <file> after SLOW_PAGE_DELAY_S (late images and fonts)


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        if self.path.startswith("/redirect?to="):  # an open redirect: 302 to the url in the query
            self.send_response(302)
            self.send_header("Location", unquote(self.path.removeprefix("/redirect?to=")))
            self.end_headers()
            return
        if self.path.startswith(("/slow.html", "/hang.html")):
            time.sleep(SLOW_PAGE_DELAY_S if self.path.startswith("/slow.html") else HANG_PAGE_DELAY_S)
            self.path = "/next.html"
        elif self.path.startswith(DELAYED_PREFIX):
            time.sleep(SLOW_PAGE_DELAY_S)
            self.path = "/" + self.path.removeprefix(DELAYED_PREFIX)
        super().do_GET()


@dataclass
class Served:
    """A running fixture server: its base URL and the paths it was asked for."""

    url: str
    paths: list[str]


def _serve() -> Iterator[Served]:
    handler = functools.partial(_Handler, directory=str(FIXTURES))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    served = Served(f"http://127.0.0.1:{server.server_port}", [])
    server.paths = served.paths  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def fixture_url() -> Iterator[str]:
    """Base URL of the fixture pages (the allowed host); ``/redirect?to=<url>`` answers 302 to ``url``."""
    for served in _serve():
        yield served.url


@pytest.fixture(scope="session")
def outside() -> Iterator[Served]:
    """A second server on another port: a host that is NOT on the allow-list."""
    yield from _serve()


@pytest.fixture(scope="session")
def outside_url(outside: Served) -> str:
    return outside.url


@pytest.fixture(scope="session")
def pool_settings(fixture_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    host = fixture_url.split("//", 1)[1]
    return Settings(home=tmp_path_factory.mktemp("bp-home"), security={"allowed_hosts": [host]},
                    database={"url": "sqlite://"}, browser={"step_timeout_s": 20.0, "episode_timeout_s": 120.0})


@pytest.fixture(scope="session")
async def pool(pool_settings: Settings) -> AsyncIterator[BrowserPool]:
    async with BrowserPool(pool_settings, size=1) as p:
        yield p


@pytest.fixture(scope="session")
def make_task() -> Callable[..., TaskConfig]:
    """A task config whose start_url is a fixture page."""

    def make(url: str, task_id: str = "fixture", **extra: object) -> TaskConfig:
        return TaskConfig(task_id=task_id, sites=["wikipedia"], intent="exercise the fixture page", start_url=url,
                          **extra)

    return make


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The built-in sandbox sites on free ports; settings (SQLite home) whose site URLs point at them."""
    from webrl.db.migrate import upgrade
    from webrl.sandbox.server import running_sandbox

    home = tmp_path_factory.mktemp("bp-sandbox")
    base = Settings(home=home, database={"url": f"sqlite:///{home / 'webrl.db'}"},
                    browser={"pool_size": 2, "step_timeout_s": 30.0, "episode_timeout_s": 300.0})
    upgrade(base)
    with running_sandbox(base) as running:
        yield running


@pytest.fixture(scope="session")
def sandbox_tasks() -> list[TaskConfig]:
    """The first few held-out sandbox tasks (each with an eval block and an oracle)."""
    from webrl.sandbox.tasks.suite import build_suite

    return build_suite(0)["test"][:4]


def store_tasks(settings: Settings, tasks: list[TaskConfig], prefix: str = "sandbox/test") -> list[str]:
    """Upsert ``tasks`` into the settings' database; returns their keys."""
    from webrl.db import repository
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        return repository.upsert_tasks(session, tasks, prefix, origin="test", split="test")


@pytest.fixture(scope="session")
def stored_keys() -> Callable[..., list[str]]:
    return store_tasks


@pytest.fixture
async def socket_listener() -> AsyncIterator[tuple[str, list[str]]]:
    """A WebSocket server on another loopback port (a host off the allow-list): its URL and the paths it was
    asked for."""
    from websockets.asyncio.server import ServerConnection, serve

    asked: list[str] = []

    async def greet(connection: ServerConnection) -> None:
        asked.append(connection.request.path if connection.request else "?")
        await connection.send("hello from outside")

    async with serve(greet, "127.0.0.1", 0) as server:
        yield f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/", asked
