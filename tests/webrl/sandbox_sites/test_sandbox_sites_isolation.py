"""Per-episode isolation: a change in one episode is invisible to another and to the default episode, and
dropping the episode resets it (reddit and gitlab share one cookie, and each keeps its own database)."""

from __future__ import annotations

import re
import time

import pytest

from webrl.sandbox.auth import DEFAULT_ACCOUNTS

FRESH_EPISODE_BUDGET_S = 0.3  # ~20-40 ms measured idle; generous for a loaded 2-core machine

CHANGES = {
    # site: (write path, form, page that shows it, text that appears)
    "reddit": (f"/user/{DEFAULT_ACCOUNTS['reddit'][0]}/edit_biography", {"biography": "Episode-only bio"},
               f"/user/{DEFAULT_ACCOUNTS['reddit'][0]}", "Episode-only bio"),
    "gitlab": ("/byteblaze/dotfiles/-/issues", {"title": "Episode-only issue"}, "/byteblaze/dotfiles/-/issues",
               "Episode-only issue"),
}


@pytest.mark.parametrize("site", sorted(CHANGES))
def test_change_stays_in_its_episode(client, store, site: str) -> None:
    write, form, show, text = CHANGES[site]
    a = client(site, episode="iso-a-" + site)
    b = client(site, episode="iso-b-" + site)
    assert a.post(write, data=form).status_code == 200
    assert text in a.get(show).text
    assert text not in b.get(show).text
    assert text not in client(site, episode="default").get(show).text
    dropped = a.delete("/__webrl/episodes/iso-a-" + site)
    assert dropped.json() == {"episode": "iso-a-" + site, "dropped": True}
    assert text not in a.get(show).text  # the next request copies the template again


def test_one_cookie_covers_both_sites(client) -> None:
    episode = "iso-shared"
    reddit, gitlab = client("reddit", episode=episode), client("gitlab", episode=episode)
    reddit.post("/f/books/1/comment", data={"body": "shared episode"})
    gitlab.post("/byteblaze/dotfiles/-/toggle_star")
    assert "shared episode" in reddit.get("/f/books/1").text
    assert "Unstar" in gitlab.get("/byteblaze/dotfiles").text
    assert reddit.delete(f"/__webrl/episodes/{episode}").json()["dropped"] is True
    assert "Unstar" not in gitlab.get("/byteblaze/dotfiles").text  # dropping frees every database


def test_reset_is_milliseconds(client) -> None:
    """A fresh episode's first page (its template copy included) is served in a fraction of a second."""
    client("gitlab", episode="iso-warm").get("/byteblaze/dotfiles")  # compile the templates once
    c = client("gitlab", episode="iso-timing")
    start = time.perf_counter()
    page = c.get("/byteblaze/dotfiles")
    elapsed = time.perf_counter() - start
    assert page.status_code == 200 and re.search(r"star-count", page.text)
    assert elapsed < FRESH_EPISODE_BUDGET_S, f"first request of a new episode took {elapsed:.3f}s"
