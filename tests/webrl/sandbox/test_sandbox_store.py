"""Per-episode state: template determinism, reset time, isolation of concurrent episodes over HTTP."""

from __future__ import annotations

import sqlite3
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from webrl.config import Settings
from webrl.sandbox.sites import builders
from webrl.sandbox.sites.shopping.seed import build as build_shop
from webrl.sandbox.store import EPISODE_COOKIE, EpisodeStore, InvalidEpisodeError, episode_cookies

RESET_BUDGET_S = 0.050  # the bound on an episode reset


def _dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_shop_seed_is_deterministic_and_seed_dependent(tmp_path: Path) -> None:
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        build_shop(tmp_path / f"{name}.sqlite", seed)
    assert _dump(tmp_path / "a.sqlite") == _dump(tmp_path / "b.sqlite")
    assert _dump(tmp_path / "a.sqlite") != _dump(tmp_path / "c.sqlite")
    conn = sqlite3.connect(tmp_path / "a.sqlite")
    assert conn.execute("SELECT COUNT(*) FROM products").fetchone()[0] >= 300
    assert conn.execute("SELECT COUNT(*) FROM orders").fetchone()[0] >= 200


def test_reset_is_well_under_50ms(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path, 0, builders())
    store.build_all()
    timings = []
    for i in range(20):
        episode = f"ep{i}"
        start = time.perf_counter()
        store.drop(episode)
        for db in store.builders:  # a reset copies every site's database on first use
            store.connect(db, episode).close()
        timings.append(time.perf_counter() - start)
    assert statistics.median(timings) < RESET_BUDGET_S, timings


def test_episode_ids_are_validated(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path, 0, builders())
    with pytest.raises(InvalidEpisodeError, match="episode id"):
        store.connect("shop", "../escape")
    with pytest.raises(KeyError, match="unknown sandbox database"):
        store.template_path("nope")


def test_episode_cookies_cover_every_site_url(sandbox: Settings) -> None:
    cookies = episode_cookies(sandbox, "abc")
    assert {c["url"] for c in cookies} >= {sandbox.site_url("shopping"), sandbox.site_url("shopping_admin")}
    assert all(c["name"] == EPISODE_COOKIE and c["value"] == "abc" for c in cookies)


def _cart_text(client: httpx.Client, base: str) -> str:
    return client.get(f"{base}/cart").text


def _episode_adds(base: str, episode: str, product_id: int) -> str:
    with httpx.Client(cookies={EPISODE_COOKIE: episode}, timeout=30) as client:
        client.post(f"{base}/cart/add", data={"product_id": product_id, "qty": 1}, follow_redirects=False)
        return _cart_text(client, base)


def test_concurrent_episodes_never_see_each_others_writes(sandbox: Settings) -> None:
    base = sandbox.site_url("shopping")
    names = {pid: httpx.get(f"{base}/product/{pid}").text.split('class="product-name">')[1].split("<")[0]
             for pid in range(1, 9)}
    with ThreadPoolExecutor(max_workers=8) as pool:
        carts = list(pool.map(lambda pid: _episode_adds(base, f"iso{pid}", pid), names))
    for (pid, name), cart in zip(names.items(), carts, strict=True):
        others = [n for p, n in names.items() if p != pid]
        assert name in cart
        assert not any(other in cart for other in others)
    with httpx.Client(timeout=30) as client:  # no cookie: the shared default episode is untouched
        assert not any(name in _cart_text(client, base) for name in names.values())


def test_shared_database_across_shopping_and_admin_within_an_episode(sandbox: Settings) -> None:
    from webrl.sandbox.auth import login_cookies

    admin = sandbox.site_url("shopping_admin")
    cookie = login_cookies("shopping_admin", admin)[0]
    with httpx.Client(cookies={EPISODE_COOKIE: "shared1", cookie["name"]: cookie["value"]}, timeout=30,
                      follow_redirects=True) as client:
        r = client.post(f"{admin}/catalog/products/3", data={"name": "Renamed Thing", "price": "12.50", "qty": "7",
                                                            "status": "enabled"})
        assert r.status_code == 200
        page = client.get(f"{sandbox.site_url('shopping')}/product/3").text
        assert "Renamed Thing" in page and "$12.50" in page
    assert "Renamed Thing" not in httpx.get(f"{sandbox.site_url('shopping')}/product/3").text


def test_delete_endpoint_resets_an_episode(sandbox: Settings) -> None:
    base = sandbox.site_url("shopping")
    with httpx.Client(cookies={EPISODE_COOKIE: "resetme"}, timeout=30, follow_redirects=True) as client:
        client.post(f"{base}/cart/add", data={"product_id": 11, "qty": 4})
        assert "You have no items" not in _cart_text(client, base)
        start = time.perf_counter()
        r = client.delete(f"{base}/__webrl/episodes/resetme")
        assert r.json() == {"episode": "resetme", "dropped": True}
        assert "You have no items" in _cart_text(client, base)
        assert time.perf_counter() - start < 1.0
        assert client.delete(f"{base}/__webrl/episodes/bad.id").status_code == 422


def test_bad_episode_cookie_is_a_422_naming_the_cookie(sandbox: Settings) -> None:
    r = httpx.get(f"{sandbox.site_url('shopping')}/cart", cookies={EPISODE_COOKIE: "no/slashes"})
    assert r.status_code == 422
    assert EPISODE_COOKIE in r.text


def test_a_bad_episode_cookie_is_quoted_as_text_never_as_markup(sandbox: Settings) -> None:
    """Any page on the host can set the cookie: its value is shown escaped, so it cannot put a script on the site."""
    r = httpx.get(f"{sandbox.site_url('shopping')}/cart", cookies={EPISODE_COOKIE: "<script>alert(1)</script>"})
    assert r.status_code == 422
    assert "<script>" not in r.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
