"""One reading of a URL: the start-URL check, the in-browser guard and Chromium agree on the host of every URL
(the WHATWG URL Standard, :func:`webrl.safety.allow_list.browser_url`), and a navigation the browser itself refuses
(a redirect to ``file:`` or ``chrome:``) is named in the observation's error."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from services.browser_pool.episode import BrowserEpisode, StartUrlRefused
from webrl.safety.allow_list import browser_url

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]

#: URLs Python's urlsplit and Chromium read differently (the first one's host was the allowed one to urlsplit).
TRICKY = ["http://127.0.0.1:18999\\@127.0.0.1:7770/", "http://127.0.0.1:7770\\\\evil.test/", "HTTP://EXAMPLE.org:80/a",
          "http://2130706433:7770/", "http://0x7f.1:7770/", " http://example.org/ ", "http://ex\tample.org/",
          "http://a%2eb.test/", "https://user:pw@example.org:443/", "http://[::1]:7770/"]


@pytest.mark.parametrize("url", TRICKY)
async def test_the_allow_list_reads_a_url_as_chromium_does(pool, pool_settings, fixture_url, make_task, url):
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/next.html"), pool_settings)
    try:
        seen = await episode.active.evaluate("u => { const p = new URL(u); return [p.protocol, p.host, p.href]; }",
                                             url)
    finally:
        await episode.close()
    parsed = browser_url(url)
    assert parsed is not None and [parsed.protocol, parsed.host, parsed.href] == seen


async def test_a_backslash_start_url_is_refused_by_the_host_chromium_would_reach(pool, pool_settings, fixture_url,
                                                                                 outside, make_task):
    """urlsplit read this as the allowed host; Chromium goes to the outside port, so the check refuses it."""
    allowed = fixture_url.split("//", 1)[1]
    sneaky = f"{outside.url}\\@{allowed}/outside.html"
    outside.paths.clear()
    with pytest.raises(StartUrlRefused, match=re.escape(f"host {outside.url.split('//', 1)[1]} is not on")):
        await BrowserEpisode.open(pool, make_task(sneaky), pool_settings)
    assert outside.paths == []


@pytest.mark.parametrize("target", ["file:///etc/passwd", "chrome://version/"])
async def test_a_redirect_the_browser_refuses_is_named_in_the_error(pool, pool_settings, fixture_url, make_task,
                                                                   target):
    away = f"{fixture_url}/redirect?to={quote(target)}"
    episode = await BrowserEpisode.open(pool, make_task(f"{fixture_url}/away.html?to={quote(away)}"), pool_settings)
    try:
        link = re.search(r'<a id="(\d+)"[^>]*> Away link', episode.observation.html)
        assert link, episode.observation.html
        result = await episode.step(f'do(action="Click", element="{link.group(1)}")')
        assert "root:" not in result.observation.html
        error = result.observation.error or ""
        assert f"{away} did not load" in error and "ERR_UNSAFE_REDIRECT" in error, error
    finally:
        await episode.close()
