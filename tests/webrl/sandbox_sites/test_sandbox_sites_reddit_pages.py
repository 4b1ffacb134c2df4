"""reddit site: pages render, lists paginate, forms change state, bad input is refused."""

from __future__ import annotations

import re

import pytest

from webrl.sandbox.auth import DEFAULT_ACCOUNTS

USER = DEFAULT_ACCOUNTS["reddit"][0]


@pytest.mark.parametrize("path", ["/", "/new", "/top", "/forums", "/f/books", "/f/books/new", "/f/books/top",
                                  "/search?q=Dune", "/user/Sorkill", "/submit", "/login"])
def test_pages_render(client, path: str) -> None:
    response = client("reddit").get(path)
    assert response.status_code == 200, response.text[-300:]
    assert "<header>" in response.text and "Postmill" in response.text


def test_listing_shows_twenty_posts_and_paginates(client) -> None:
    c = client("reddit")
    first = c.get("/").text
    assert first.count('class="submission__title"') == 20
    assert 'rel="next"' in first
    second = c.get("/?page=2").text
    titles = set(re.findall(r'class="submission__title" href="[^"]+">([^<]+)<', first))
    assert titles.isdisjoint(re.findall(r'class="submission__title" href="[^"]+">([^<]+)<', second))


def _first_title(html: str) -> str:
    match = re.search(r'class="submission__title" href="[^"]+">([^<]+)<', html)
    assert match is not None
    return match.group(1)


def test_new_sort_is_newest_first(client, site_data) -> None:
    newest = site_data.value("reddit", "SELECT p.title FROM posts p JOIN forums f ON f.id = p.forum_id "
                                       "WHERE f.name = 'books' ORDER BY p.created DESC LIMIT 1")
    page = client("reddit").get("/f/books/new").text
    assert _first_title(page) == newest


def test_bad_input_is_refused(client) -> None:
    c = client("reddit")
    assert c.get("/f/books?page=0").status_code == 422
    missing = c.get("/f/no-such-forum")
    assert missing.status_code == 404 and "no forum named no-such-forum" in missing.text
    assert c.post("/sv/1", data={"choice": "7"}).status_code == 422
    assert c.post("/f/books/1/comment", data={"body": "   "}).status_code == 422


def test_login_form(client) -> None:
    c = client("reddit", login=False)
    assert c.get("/submit").url.path == "/login"  # login required
    wrong = c.post("/login", data={"username": USER, "password": "nope", "next": "/"})
    assert wrong.status_code == 422 and "Invalid username or password" in wrong.text
    ok = c.post("/login", data={"username": USER, "password": DEFAULT_ACCOUNTS["reddit"][1], "next": "/forums"})
    assert ok.status_code == 200 and ok.url.path == "/forums" and USER in ok.text


def _post_vote(html: str) -> tuple[str, int]:
    """(class of the post's vote form, its score)."""
    match = re.search(r'submission__vote">\s*<form class="([^"]+)".*?vote__net-score">(-?\d+)<', html, re.S)
    assert match is not None
    return match.group(1), int(match.group(2))


def test_vote_toggles(client) -> None:
    c = client("reddit")
    start_class, score = _post_vote(c.get("/f/books/1").text)
    assert start_class == "vote"
    assert _post_vote(c.post("/sv/1", data={"choice": "1"}).text) == ("vote vote--user-upvoted", score + 1)
    assert _post_vote(c.post("/sv/1", data={"choice": "-1"}).text) == ("vote vote--user-downvoted", score - 1)
    assert _post_vote(c.post("/sv/1", data={"choice": "-1"}).text) == ("vote", score)


def test_comment_submit_bio_subscribe(client) -> None:
    c = client("reddit")
    commented = c.post("/f/books/1/comment", data={"body": "Lovely thread"})
    assert commented.status_code == 200 and "Lovely thread" in commented.text
    made = c.post("/submit", data={"forum": "food", "title": "Sourdough starter tips", "body": "Feed it daily"})
    assert made.url.path.startswith("/f/food/") and "Sourdough starter tips" in made.text
    assert _first_title(c.get("/f/food/new").text) == "Sourdough starter tips"
    invalid = c.post("/submit", data={"forum": "food", "title": "  "})
    assert invalid.status_code == 422 and "title must be" in invalid.text
    bio = c.post(f"/user/{USER}/edit_biography", data={"biography": "I am a robot"})
    assert re.search(r'user-bio__biography">I am a robot<', bio.text)
    assert c.post("/user/Sorkill/edit_biography", data={"biography": "x"}).status_code == 403
    assert "Unsubscribe" in c.post("/f/gaming/subscribe").text
    assert ">Subscribe<" in c.post("/f/gaming/unsubscribe").text


def test_widgets_are_present(client) -> None:
    """The dropdown (user menu, sort), tabs (user page) and modal (delete own post) the tasks rely on."""
    c = client("reddit")
    assert 'data-toggle="dropdown"' in c.get("/f/books").text
    assert 'role="tab"' in c.get("/user/Sorkill").text
    made = c.post("/submit", data={"forum": "books", "title": "Delete me"})
    assert 'data-open-modal="delete-modal"' in made.text
    post_id = made.url.path.split("/")[3]
    assert c.post(f"/f/books/{post_id}/delete").url.path == "/f/books"
    assert c.get(f"/f/books/{post_id}").status_code == 404


def test_back_redirects_stay_on_site(client) -> None:
    """Subscribing (like voting) goes back to the referring page only when that page is on this site."""
    c = client("reddit")
    back = c.post("/f/gaming/subscribe", headers={"referer": "http://testserver/f/books?page=2"},
                  follow_redirects=False)
    assert back.status_code == 303 and back.headers["location"] == "/f/books?page=2"
    for referer in ("http://evil.example/x", "http://testserver//evil.example/x"):
        away = c.post("/f/gaming/subscribe", headers={"referer": referer}, follow_redirects=False)
        assert away.status_code == 303 and away.headers["location"] == "/f/gaming", referer
