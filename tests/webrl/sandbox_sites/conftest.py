"""Fixtures for the reddit and gitlab sandbox sites: a template store, in-process clients (one episode
each, optionally logged in), and, for the oracle tests, the real sites on free ports plus one Chromium pool."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from webrl.config import Settings
from webrl.sandbox import auth
from webrl.sandbox.site import build_site_app
from webrl.sandbox.sites.gitlab import seed as gitlab_seed
from webrl.sandbox.sites.reddit import seed as reddit_seed
from webrl.sandbox.store import EPISODE_COOKIE, EpisodeStore, sandbox_root
from webrl.sandbox.tasks.base import SiteData

SITES = ("reddit", "gitlab")


@pytest.fixture(scope="session")
def site_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sandbox_sites")


@pytest.fixture(scope="session")
def store(site_home: Path) -> EpisodeStore:
    """Templates of seed 0 for the two sites (built once per test session, where ``served`` finds them too)."""
    built = EpisodeStore(sandbox_root(Settings(home=site_home)), 0,
                         {"reddit": reddit_seed.build, "gitlab": gitlab_seed.build})
    built.build_all()
    return built


@pytest.fixture(scope="session")
def site_data(store: EpisodeStore) -> Iterator[SiteData]:
    data = SiteData({db: store.template_path(db) for db in SITES}, seed=0)
    yield data
    data.close()


Client = Callable[..., TestClient]


@pytest.fixture
def client(store: EpisodeStore, site_home: Path) -> Iterator[Client]:
    """``client(site, login=True, episode=None)``: a TestClient on its own episode (fresh state)."""
    made: list[TestClient] = []

    def make(site: str, login: bool = True, episode: str | None = None) -> TestClient:
        app = build_site_app(site, store, Settings(home=site_home))
        c = TestClient(app)
        c.cookies.set(EPISODE_COOKIE, episode or uuid.uuid4().hex[:16])
        if login:
            c.cookies.set(auth.session_cookie_name(site), auth.sign_session(site, auth.DEFAULT_ACCOUNTS[site][0]))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture(scope="session")
def served(site_home: Path, store: EpisodeStore) -> Iterator[Settings]:
    """The two sites served on free ports (real uvicorn), settings pointing at them."""
    from webrl.sandbox.server import running_sandbox

    with running_sandbox(Settings(home=site_home), sites=list(SITES)) as settings:
        yield settings


@pytest.fixture(scope="session")
async def pool(served: Settings) -> AsyncIterator[object]:
    from services.browser_pool.pool import BrowserPool

    async with BrowserPool(served, size=2) as browsers:
        yield browsers
