"""After login every site redirects only to a path of its own: ``next`` cannot send the browser elsewhere."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import httpx
import pytest

from webrl.config import Settings
from webrl.sandbox.auth import DEFAULT_ACCOUNTS
from webrl.sandbox.site import same_site_path
from webrl.sandbox.store import EPISODE_COOKIE

#: The login form's user field and where a login without a usable ``next`` lands, per site.
LOGIN = {"shopping": ("email", "/account"), "shopping_admin": ("username", "/"), "reddit": ("username", "/"),
         "gitlab": ("username", "/")}
OFF_SITE = ["//evil.example:8000/x", "/\\evil.example/x", "https://evil.example/x", "/\t/evil.example/x",
            "javascript:alert(1)", "evil.example/x"]


def _login(sandbox: Settings, site: str, next_url: str) -> httpx.Response:
    field, _ = LOGIN[site]
    user, password = DEFAULT_ACCOUNTS[site]
    with httpx.Client(cookies={EPISODE_COOKIE: uuid.uuid4().hex}, timeout=30) as client:
        return client.post(f"{sandbox.site_url(site)}/login",
                           data={field: user, "password": password, "next": next_url})


@pytest.mark.parametrize("site", sorted(LOGIN))
def test_login_next_stays_on_site(sandbox: Settings, site: str) -> None:
    home = LOGIN[site][1]
    for next_url in OFF_SITE:
        reply = _login(sandbox, site, next_url)
        assert reply.status_code == 303 and reply.headers["location"] == home, (site, next_url)
    kept = _login(sandbox, site, "/search?q=x")  # the control: an on-site path is kept
    assert kept.status_code == 303 and kept.headers["location"] == "/search?q=x"
    assert not urlsplit(kept.headers["location"]).netloc


def test_same_site_path() -> None:
    assert same_site_path("/a/b?c=d#e") == "/a/b?c=d#e"
    for target in [*OFF_SITE, "", "/x\n", "/\x7f"]:
        assert same_site_path(target, "/home") == "/home", target
