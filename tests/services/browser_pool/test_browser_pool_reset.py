"""Reset from a task config: storage_state, geolocation, several start tabs, placeholders."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.browser_pool.episode import BrowserEpisode, StorageStateRefused

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


async def test_storage_state_geolocation_and_tabs(pool, pool_settings, fixture_url, make_task):
    host = fixture_url.split("//")[1].split(":")[0]
    state = pool_settings.artifacts_dir / ".auth" / "state.json"  # WebArena's ./.auth/<site>_state.json, in the store
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"cookies": [{"name": "login", "value": "alice", "domain": host, "path": "/",
                                              "expires": -1, "httpOnly": False, "secure": False, "sameSite": "Lax"}],
                                 "origins": []}))
    task = make_task(f"{fixture_url}/state.html |AND| {fixture_url}/next.html", storage_state="./.auth/state.json",
                     geolocation={"latitude": 40.5, "longitude": -79.25})
    episode = await BrowserEpisode.open(pool, task, pool_settings)
    try:
        obs = episode.observation
        assert "Cookies: login=alice" in obs.html
        assert "Position: 40.5 -79.25" in obs.html
        assert obs.title == "State fixture" and obs.tabs == ["State fixture", "Next page"]  # first tab active
    finally:
        await episode.close()


async def test_placeholders_resolve_to_site_urls(pool, pool_settings, fixture_url, make_task):
    settings = pool_settings.replace(sites={"wikipedia_url": fixture_url})
    episode = await BrowserEpisode.open(pool, make_task("__WIKIPEDIA__/next.html"), settings)
    try:
        assert episode.observation.url == f"{fixture_url}/next.html"
        assert episode.task.start_url == f"{fixture_url}/next.html"
    finally:
        await episode.close()


async def test_unreachable_start_url_is_reported(pool, pool_settings, make_task):
    listed = pool_settings.replace(security={"allowed_hosts": [*pool_settings.security.allowed_hosts,
                                                               "example.invalid"]})
    episode = await BrowserEpisode.open(pool, make_task("http://example.invalid/"), listed)
    try:
        assert episode.observation.error and "could not open http://example.invalid/" in episode.observation.error
    finally:
        await episode.close()


async def test_storage_state_outside_the_store_is_refused_before_a_browser_is_leased(pool, pool_settings,
                                                                                     fixture_url, make_task, tmp_path):
    elsewhere = tmp_path / "state.json"
    elsewhere.write_text('{"cookies": [], "origins": []}')
    for path in (str(elsewhere), "../../" + elsewhere.name):
        with pytest.raises(StorageStateRefused, match="outside the artifacts store") as refused:
            await BrowserEpisode.open(pool, make_task(f"{fixture_url}/next.html", storage_state=path), pool_settings)
        assert refused.value.reason == "storage_state_refused"
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/next.html"), pool_settings)  # slot is free
    await episode.close()


async def test_a_storage_state_with_local_storage_reaches_the_page(pool, pool_settings, fixture_url, make_task):
    """localStorage needs a context made with the state: the checked records are what Playwright gets."""
    state = pool_settings.artifacts_dir / ".auth" / "local.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"cookies": [], "origins": [
        {"origin": fixture_url, "localStorage": [{"name": "token", "value": "t-1"}]}]}))
    task = make_task(f"{fixture_url}/next.html", storage_state="./.auth/local.json")
    episode = await BrowserEpisode.open(pool, task, pool_settings)
    try:
        assert await episode.active.evaluate("localStorage.getItem('token')") == "t-1"
    finally:
        await episode.close()


async def test_a_context_the_stock_cannot_take_back_is_closed_not_left_behind(pool_settings, fixture_url, make_task,
                                                                              monkeypatch):
    """Giving a context back to the stock is bounded (EPISODE_CLEANUP_TIMEOUT_S); when it does not finish (a CDP
    call that never answers), the context is closed instead: neither it nor its renderer stays on the browser for
    the browser's life."""
    from services.browser_pool import episode as episode_module
    from services.browser_pool.pool import BrowserPool
    from services.browser_pool.stock import ContextStock

    async def never(self, stage, cleanup=None):
        await asyncio.Event().wait()

    monkeypatch.setattr(episode_module, "EPISODE_CLEANUP_TIMEOUT_S", 0.5)
    async with BrowserPool(pool_settings, size=1) as own:
        episode = await BrowserEpisode.open(own, make_task(f"{fixture_url}/next.html"), pool_settings)
        context = episode.context
        monkeypatch.setattr(ContextStock, "give_back", never)
        await episode.close()
        assert context not in own.slots[0].browser.contexts  # closed, not left open beside the stock
        assert own.leased == 0
