"""Task templates for the reddit sandbox site (intent_template_id 300-399), with their oracle solvers.

Kinds: info (string_match on the answer), nav (url_match on the last page) and mutate (program_html
reading the changed state from the page that shows it, with WebArena-style ``document.querySelector``
locators). Slots are sampled from the seed database; hidden ``_`` keys carry what the evaluation needs.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Generator
from typing import Any

from webrl.agent.observed_page import ObservedPage
from webrl.agent.schemas import Observation, TaskConfig
from webrl.sandbox.oracles import OracleStuck, answer, click, search, select, type_text
from webrl.sandbox.sites.reddit.oracle_steps import open_link, open_menu_item, reach
from webrl.sandbox.sites.reddit.seed import DEFAULT_USER, FILLERS, slugify
from webrl.sandbox.tasks.base import (
    Script,
    SiteData,
    Template,
    html_check,
    program_html,
    string_match,
    url_match,
)

Steps = Generator[str, Observation, Observation]  # a sub-script: yields actions, returns where it ends

DB = "reddit"
SITE = "__REDDIT__"
VOTE_LOCATOR = "document.querySelector('div.submission__vote').querySelector('form').getAttribute('class')"
LAST_COMMENT_LOCATOR = ("document.querySelector('.comments').lastElementChild"
                        ".querySelector('.comment__body').outerText")
BIO_LOCATOR = 'document.querySelector(".user-bio__biography").outerText'
SUBSCRIBE_LOCATOR = "document.querySelector('.subscribe-button').outerText"
FIRST_TITLE_LOCATOR = "document.querySelector('.submission__title').outerText"

COMMENT_TEXTS = [
    "Thanks for sharing this!", "I had the same experience last year.", "Great point, I never thought of that.",
    "Could you post an update later?", "This is the best thing I have read today.", "I respectfully disagree.",
    "Where can I find more about this?", "Saved for later, thanks.", "Welcome to the forum!",
    "Same here, highly recommend it.", "This made me smile.", "Do you have a source for that?",
]
BIO_TEXTS = [
    "I am a robot", "Seeking SDE positions", "Pro Python Developer with 20 years of Experience",
    "Book lover and amateur baker", "Living in Worcester, MA", "Coffee first, questions later",
    "Photographer and weekend hiker", "Learning Rust one borrow at a time", "Retired teacher, lifelong reader",
    "Just here for the comments", "Gardening, games and good food", "Open source contributor",
]
NEW_TITLES = [
    "Looking for recommendations from this community", "What is everyone working on this week?",
    "First post here, hello everyone", "Weekly discussion thread", "Is it just me or is this getting better?",
    "A small win I wanted to share", "Question for the experts here", "Best resources for beginners?",
    "What surprised you the most this year?", "Meetup ideas for the spring",
]


# Sampling ---------------------------------------------------------------------------------------------

def _posts(data: SiteData, rng: random.Random, where: str = "1 = 1", *args: Any) -> list[dict[str, Any]]:
    rows = data.rows(DB, "SELECT p.id, p.title, f.name AS forum, u.username AS author, u.bio, "
                         "(SELECT COUNT(*) FROM comments c WHERE c.post_id = p.id) AS n_comments "
                         "FROM posts p JOIN forums f ON f.id = p.forum_id JOIN users u ON u.id = p.user_id "
                         f"WHERE {where} ORDER BY p.id", *args)
    items = [dict(r) for r in rows]
    rng.shuffle(items)
    return items


def _post_inst(row: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"title": row["title"], "forum": row["forum"], "_post_url": post_url(row), "_author": row["author"],
            "_bio": row["bio"], "_n_comments": row["n_comments"], **extra}


def post_url(row: dict[str, Any]) -> str:
    return f"{SITE}/f/{row['forum']}/{row['id']}/{slugify(row['title'])}"


def _forums(data: SiteData, rng: random.Random, subscribed: bool | None = None) -> list[dict[str, Any]]:
    rows = [dict(r) for r in data.rows(
        DB, "SELECT f.name, (SELECT COUNT(*) FROM subscriptions s WHERE s.forum_id = f.id) AS n_subscribers, "
            "EXISTS (SELECT 1 FROM subscriptions s JOIN users u ON u.id = s.user_id WHERE s.forum_id = f.id "
            "AND u.username = ?) AS mine FROM forums f ORDER BY f.id", DEFAULT_USER)]
    if subscribed is not None:
        rows = [r for r in rows if bool(r["mine"]) == subscribed]
    rng.shuffle(rows)
    return [{"forum": r["name"], "_n_subscribers": r["n_subscribers"]} for r in rows]


def _search_words(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    """Single capitalised words from the seed's fillers (names of books, places...) that some title uses."""
    fillers = {v for values in FILLERS.values() for v in values if re.fullmatch(r"[A-Z][a-z]{3,}", v)}
    words = sorted({w for (title,) in data.rows(DB, "SELECT title FROM posts")
                    for w in re.findall(r"[A-Z][a-z]{3,}", title) if w in fillers})
    rng.shuffle(words)
    return [{"query": w} for w in words]


# Solvers ----------------------------------------------------------------------------------------------

def _slots(task: TaskConfig) -> dict[str, Any]:
    return dict(task.instantiation_dict or {})


def go_to_forum(obs: Observation, forum: str) -> Steps:
    """From any page: Forums in the header, then the forum's link (scrolling the list if needed)."""
    if ObservedPage(obs).url.rstrip("/").endswith(f"/f/{forum}"):
        return obs
    obs = yield click(obs, "Forums", ("a",), exact=True)
    return (yield from open_link(obs, forum))


def go_to_post(obs: Observation, forum: str, title: str) -> Steps:
    """From the forum's page: find the post's title in the listing and open it."""
    obs = yield from go_to_forum(obs, forum)
    return (yield from open_link(obs, title))


def solve_open_forum(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield from go_to_forum(obs, _slots(task)["forum"])
    yield answer("")


def _solve_sort(label: str) -> Callable[[TaskConfig], Script]:
    def solve(task: TaskConfig) -> Script:
        obs = yield None
        obs = yield from open_menu_item(obs, "Sort by", label)
        yield answer("")
    return solve


def solve_author_profile(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_post(obs, slots["forum"], slots["title"])
    author = ObservedPage(obs).search_text(r"submitted by (\S+)")
    obs = yield click(obs, author, ("a",), exact=True)
    yield answer("")


def solve_search(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield search(obs, "Search", _slots(task)["query"])
    yield answer("")


def solve_comment_count(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_post(obs, slots["forum"], slots["title"])
    yield answer(ObservedPage(obs).search_text(r"(\d+) comments?\b"))


def solve_post_author(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_post(obs, slots["forum"], slots["title"])
    yield answer(ObservedPage(obs).search_text(r"submitted by (\S+)"))


def solve_newest_title(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield from open_menu_item(obs, "Sort by", "New")
    page = ObservedPage(obs)
    sort_button = page.find("Sort by", ("button",))
    after = page.elements[page.elements.index(sort_button) + 1:]
    if not after:
        raise OracleStuck("no submissions under the sort menu")
    yield answer(after[0].label)


def solve_author_bio(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_post(obs, slots["forum"], slots["title"])
    author = ObservedPage(obs).search_text(r"submitted by (\S+)")
    obs = yield click(obs, author, ("a",), exact=True)
    yield answer(ObservedPage(obs).search_text(r"Biography (.*?) Registered on"))


def solve_subscribers(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield from go_to_forum(obs, _slots(task)["forum"])
    yield answer(ObservedPage(obs).search_text(r"(\d+) subscribers"))


def _solve_vote(button: str) -> Callable[[TaskConfig], Script]:
    def solve(task: TaskConfig) -> Script:
        slots = _slots(task)
        obs = yield None
        obs = yield from go_to_post(obs, slots["forum"], slots["title"])
        obs = yield click(obs, button, ("button",), exact=True)  # the post's own vote form comes first
        yield answer("")
    return solve


def solve_comment(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_post(obs, slots["forum"], slots["title"])
    obs = yield type_text(obs, "Write a comment", slots["content"])
    obs = yield click(obs, "Post comment", ("button",), exact=True)
    yield answer("")


def solve_bio(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield from open_menu_item(obs, DEFAULT_USER, "Edit biography")
    obs = yield type_text(obs, "Biography", _slots(task)["content"])
    obs = yield click(obs, "Save", ("button",), exact=True)
    yield answer("")


def solve_subscribe(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield from go_to_forum(obs, _slots(task)["forum"])
    obs, button = yield from reach(obs, "Subscribe", ("button",), exact=True)
    obs = yield f'do(action="Click", element="{button.id}")'
    yield answer("")


def solve_create_post(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield click(obs, "Submit", ("a",), exact=True)
    obs = yield select(obs, slots["forum"])
    obs = yield type_text(obs, "Title", slots["title"])
    obs = yield click(obs, "Create submission", ("button",), exact=True)
    yield answer("")


# Templates --------------------------------------------------------------------------------------------

TEMPLATES: list[Template] = [
    Template(
        id=300, site="reddit", kind="nav", intent_template="Open the {{forum}} forum",
        sample=lambda data, rng: _forums(data, rng),
        evaluation=lambda inst, data: url_match(f"{SITE}/f/{inst['forum']}"),
        solver=solve_open_forum, start_url="/", require_login=True,
    ),
    Template(
        id=301, site="reddit", kind="nav", intent_template="Show me the newest posts in the {{forum}} forum",
        sample=lambda data, rng: _forums(data, rng),
        evaluation=lambda inst, data: url_match(f"{SITE}/f/{inst['forum']}/new"),
        solver=_solve_sort("New"), start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=302, site="reddit", kind="nav", intent_template="Show me the top posts in the {{forum}} forum",
        sample=lambda data, rng: _forums(data, rng),
        evaluation=lambda inst, data: url_match(f"{SITE}/f/{inst['forum']}/top"),
        solver=_solve_sort("Top"), start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=303, site="reddit", kind="nav",
        intent_template='Open the profile of the user who posted "{{title}}" in the {{forum}} forum',
        sample=lambda data, rng: [_post_inst(p) for p in _posts(data, rng)],
        evaluation=lambda inst, data: url_match(f"{SITE}/user/{inst['_author']}"),
        solver=solve_author_profile, start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=304, site="reddit", kind="nav", intent_template="Search for posts about {{query}}",
        sample=_search_words,
        evaluation=lambda inst, data: url_match(f"{SITE}/search?q={inst['query']}"),
        solver=solve_search, start_url="/", require_login=True,
    ),
    Template(
        id=305, site="reddit", kind="info",
        intent_template='How many comments does the post "{{title}}" in the {{forum}} forum have?',
        sample=lambda data, rng: [_post_inst(p) for p in _posts(data, rng)],
        evaluation=lambda inst, data: string_match(exact_match=str(inst["_n_comments"])),
        solver=solve_comment_count, start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=306, site="reddit", kind="info", intent_template='Who posted "{{title}}" in the {{forum}} forum?',
        sample=lambda data, rng: [_post_inst(p) for p in _posts(data, rng)],
        evaluation=lambda inst, data: string_match(exact_match=inst["_author"]),
        solver=solve_post_author, start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=307, site="reddit", kind="info",
        intent_template="What is the title of the newest post in the {{forum}} forum?",
        sample=lambda data, rng: [
            {**f, "_title": data.value(DB, "SELECT p.title FROM posts p JOIN forums f ON f.id = p.forum_id "
                                           "WHERE f.name = ? ORDER BY p.created DESC, p.id DESC", f["forum"])}
            for f in _forums(data, rng)],
        evaluation=lambda inst, data: string_match(exact_match=inst["_title"]),
        solver=solve_newest_title, start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=308, site="reddit", kind="info",
        intent_template='What does the user who posted "{{title}}" in the {{forum}} forum write in their biography?',
        sample=lambda data, rng: [_post_inst(p) for p in _posts(data, rng, "u.bio != ''")],
        evaluation=lambda inst, data: string_match(must_include=[inst["_bio"]]),
        solver=solve_author_bio, start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=309, site="reddit", kind="info", intent_template="How many subscribers does the {{forum}} forum have?",
        sample=lambda data, rng: _forums(data, rng),
        evaluation=lambda inst, data: string_match(exact_match=str(inst["_n_subscribers"])),
        solver=solve_subscribers, start_url="/", require_login=True,
    ),
    Template(
        id=310, site="reddit", kind="mutate", intent_template='Upvote the post "{{title}}" in the {{forum}} forum',
        sample=lambda data, rng: [_post_inst(p) for p in _posts(data, rng)],
        evaluation=lambda inst, data: program_html(
            html_check(inst["_post_url"], VOTE_LOCATOR, must_include=["vote--user-upvoted"])),
        solver=_solve_vote("Upvote"), start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=311, site="reddit", kind="mutate", intent_template='Downvote the post "{{title}}" in the {{forum}} forum',
        sample=lambda data, rng: [_post_inst(p) for p in _posts(data, rng)],
        evaluation=lambda inst, data: program_html(
            html_check(inst["_post_url"], VOTE_LOCATOR, must_include=["vote--user-downvoted"])),
        solver=_solve_vote("Downvote"), start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=312, site="reddit", kind="mutate",
        intent_template='Comment "{{content}}" on the post "{{title}}" in the {{forum}} forum',
        sample=lambda data, rng: [_post_inst(p, content=rng.choice(COMMENT_TEXTS)) for p in _posts(data, rng)],
        evaluation=lambda inst, data: program_html(
            html_check(inst["_post_url"], LAST_COMMENT_LOCATOR, exact_match=inst["content"])),
        solver=solve_comment, start_url="/f/{forum}", require_login=True,
    ),
    Template(
        id=313, site="reddit", kind="mutate", intent_template='Change my biography to "{{content}}"',
        sample=lambda data, rng: [{"content": text} for text in rng.sample(BIO_TEXTS, len(BIO_TEXTS))],
        evaluation=lambda inst, data: program_html(
            html_check(f"{SITE}/user/{DEFAULT_USER}", BIO_LOCATOR, exact_match=inst["content"])),
        solver=solve_bio, start_url="/", require_login=True,
    ),
    Template(
        id=314, site="reddit", kind="mutate", intent_template="Subscribe to the {{forum}} forum",
        sample=lambda data, rng: _forums(data, rng, subscribed=False),
        evaluation=lambda inst, data: program_html(
            html_check(f"{SITE}/f/{inst['forum']}", SUBSCRIBE_LOCATOR, exact_match="Unsubscribe")),
        solver=solve_subscribe, start_url="/", require_login=True,
    ),
    Template(
        id=315, site="reddit", kind="mutate",
        intent_template='Create a post titled "{{title}}" in the {{forum}} forum',
        sample=lambda data, rng: [{"title": rng.choice(NEW_TITLES), **f} for f in _forums(data, rng)
                                  for _ in range(2)],
        evaluation=lambda inst, data: program_html(
            html_check(f"{SITE}/f/{inst['forum']}/new", FIRST_TITLE_LOCATOR, exact_match=inst["title"])),
        solver=solve_create_post, start_url="/", require_login=True,
    ),
]
