"""Task templates for the gitlab sandbox site (intent_template_id 400-499), with their oracle solvers.

Kinds: info (string_match on the answer), nav (url_match on the last page) and mutate (program_html
reading the changed state from the page that shows it, with WebArena-style ``document.querySelector``
locators). Intents name a project by its name (``octicons``); pages list it as ``primer / octicons``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Generator
from typing import Any
from urllib.parse import quote

from webrl.agent.observed_page import ObservedPage
from webrl.agent.schemas import Observation, TaskConfig
from webrl.sandbox.oracles import answer, click, select, type_text
from webrl.sandbox.sites.gitlab.seed import ACCESS_LEVELS, DEFAULT_USER
from webrl.sandbox.sites.reddit.oracle_steps import open_link, open_menu_item
from webrl.sandbox.tasks.base import (
    Script,
    SiteData,
    Template,
    html_check,
    program_html,
    string_match,
    url_match,
)

DB = "gitlab"
SITE = "__GITLAB__"
Steps = Generator[str, Observation, Observation]  # a sub-script: yields actions, returns where it ends

FIRST_ISSUE_LOCATOR = "document.querySelector('.issue-title').outerText"
STATUS_LOCATOR = "document.querySelector('.issuable-status-badge').outerText"
STAR_LOCATOR = "document.querySelector('.star-btn').outerText"
LAST_NOTE_LOCATOR = ("document.querySelector('[id=\"notes-list\"]').lastElementChild"
                     ".querySelector('.timeline-discussion-body').outerText")
INVITE_ROLES = ["Guest", "Reporter", "Developer", "Maintainer"]  # Owner is not offered to invitees here
MAINTAINER = 40

NEW_ISSUE_TITLES = [
    "Add a dark mode toggle to the settings page", "Document the release process", "Search results are not sorted",
    "Support exporting data as CSV", "Login page shows a blank screen on Safari", "Add unit tests for the parser",
    "Update the contributing guide", "Improve the error message for invalid config files",
    "Crash when the config file is missing", "Add keyboard shortcuts to the editor",
]
NOTE_TEXTS = [
    "Thanks, working on it", "lgtm", "Good idea", "I can reproduce this on main.", "Could you add a test?",
    "Fixed in the latest release.", "Let's discuss this in the next meeting.", "Please rebase on main.",
    "Thank you", "Any update on this?",
]


# Sampling ---------------------------------------------------------------------------------------------

def _projects(data: SiteData, rng: random.Random, where: str = "1 = 1", *args: Any) -> list[dict[str, Any]]:
    rows = [dict(r) for r in data.rows(
        DB, "SELECT p.id, p.namespace, p.path, p.name, "
            "(SELECT COUNT(*) FROM stars s WHERE s.project_id = p.id) AS n_stars, "
            "(SELECT COUNT(*) FROM issues i WHERE i.project_id = p.id AND i.state = 'opened') AS n_open_issues "
            f"FROM projects p WHERE {where} ORDER BY p.id", *args)]
    rng.shuffle(rows)
    return rows


def _project_inst(p: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"project": p["name"], "_ns": p["namespace"], "_path": p["path"], "_n_stars": p["n_stars"],
            "_n_open_issues": p["n_open_issues"], **extra}


def _project_url(inst: dict[str, Any]) -> str:
    return f"{SITE}/{inst['_ns']}/{inst['_path']}"


def _items(data: SiteData, rng: random.Random, kind: str, where: str = "1 = 1") -> list[dict[str, Any]]:
    """Issues or merge requests with their project, author, assignee (and reviewer) display names."""
    reviewer = ", r.name AS reviewer_name" if kind == "merge_requests" else ""
    join = " LEFT JOIN users r ON r.id = i.reviewer_id" if kind == "merge_requests" else ""
    rows = [dict(r) for r in data.rows(
        DB, f"SELECT i.iid, i.title, i.state, p.namespace, p.path, p.name AS project, a.name AS author_name, "
            f"s.name AS assignee_name{reviewer} FROM {kind} i JOIN projects p ON p.id = i.project_id "
            f"JOIN users a ON a.id = i.author_id LEFT JOIN users s ON s.id = i.assignee_id{join} "
            f"WHERE {where} ORDER BY i.id")]
    rng.shuffle(rows)
    return rows


def _item_inst(row: dict[str, Any], kind: str, **extra: Any) -> dict[str, Any]:
    return {"title": row["title"], "project": row["project"], "_ns": row["namespace"], "_path": row["path"],
            "_url": f"{SITE}/{row['namespace']}/{row['path']}/-/{kind}/{row['iid']}",
            **{f"_{k}": v for k, v in row.items()}, **extra}


def _members(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    unique_names = {r["name"] for r in data.rows(DB, "SELECT name FROM users GROUP BY name HAVING COUNT(*) = 1")}
    rows = [dict(r) for r in data.rows(
        DB, "SELECT u.name AS user, m.access_level, p.namespace, p.path, p.name AS project FROM members m "
            "JOIN users u ON u.id = m.user_id JOIN projects p ON p.id = m.project_id ORDER BY p.id, u.id")]
    rows = [r for r in rows if r["user"] in unique_names]
    rng.shuffle(rows)
    return [{"user": r["user"], "project": r["project"], "_ns": r["namespace"], "_path": r["path"],
             "_role": ACCESS_LEVELS[r["access_level"]]} for r in rows]


def _invites(data: SiteData, rng: random.Random) -> list[dict[str, Any]]:
    """(user, project, role) where the default user may invite (Maintainer+) and the user is not a member."""
    projects = _projects(data, rng, "p.id IN (SELECT m.project_id FROM members m JOIN users u ON u.id = m.user_id "
                                    "WHERE u.username = ? AND m.access_level >= ?)", DEFAULT_USER, MAINTAINER)
    out = []
    for p in projects:
        outsiders = [r["username"] for r in data.rows(
            DB, "SELECT username FROM users WHERE id NOT IN (SELECT user_id FROM members WHERE project_id = ?) "
                "ORDER BY id", p["id"])]
        for username in rng.sample(outsiders, min(4, len(outsiders))):
            out.append(_project_inst(p, user=username, role=rng.choice(INVITE_ROLES)))
    rng.shuffle(out)
    return out


# Solvers ----------------------------------------------------------------------------------------------

def _slots(task: TaskConfig) -> dict[str, Any]:
    return dict(task.instantiation_dict or {})


def go_to_project(obs: Observation, project: str) -> Steps:
    """From any page: Explore, then the project's "namespace / name" link (scrolling and paging)."""
    if ObservedPage(obs).has(project, ("a",), exact=True):  # already in the project: its sidebar names it
        return obs
    obs = yield click(obs, "Explore", ("a",), exact=True)
    return (yield from open_link(obs, f"/ {project}", exact=False))


def go_to_item(obs: Observation, project: str, section: str, title: str, state_tab: str | None = None) -> Steps:
    """From anywhere: the project, its Issues or Merge requests list (a state tab), then the item's page."""
    page = ObservedPage(obs)
    if not page.url.split("?")[0].endswith(f"/-/{section}"):
        obs = yield from go_to_project(obs, project)
        obs = yield click(obs, "Issues" if section == "issues" else "Merge requests", ("a",), exact=True)
    if state_tab is not None:
        obs = yield click(obs, state_tab, ("a",))
    return (yield from open_link(obs, title))


def _solve_project_section(link: str, tab: str | None = None) -> Callable[[TaskConfig], Script]:
    def solve(task: TaskConfig) -> Script:
        obs = yield None
        obs = yield from go_to_project(obs, _slots(task)["project"])
        obs = yield click(obs, link, ("a",), exact=True)
        if tab is not None:
            obs = yield click(obs, tab, ("a",))
        yield answer("")
    return solve


def solve_label_filter(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield from open_menu_item(obs, "Label", _slots(task)["label"])
    yield answer("")


def _solve_project_number(pattern: str) -> Callable[[TaskConfig], Script]:
    def solve(task: TaskConfig) -> Script:
        obs = yield None
        obs = yield from go_to_project(obs, _slots(task)["project"])
        yield answer(ObservedPage(obs).search_text(pattern))
    return solve


def _solve_item_fact(section: str, pattern: str) -> Callable[[TaskConfig], Script]:
    def solve(task: TaskConfig) -> Script:
        slots = _slots(task)
        obs = yield None
        obs = yield from go_to_item(obs, slots["project"], section, slots["title"])
        yield answer(ObservedPage(obs).search_text(pattern).strip())
    return solve


def solve_member_role(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_project(obs, slots["project"])
    obs = yield click(obs, "Members", ("a",), exact=True)
    roles = "|".join(ACCESS_LEVELS.values())
    yield answer(ObservedPage(obs).search_text(rf"{re.escape(slots['user'])} @\S+ Direct member since \S+ ({roles})"))


def solve_new_issue(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_project(obs, slots["project"])
    obs = yield click(obs, "Issues", ("a",), exact=True)
    obs = yield click(obs, "New issue", ("a",), exact=True)
    obs = yield type_text(obs, "Title", slots["title"])
    obs = yield click(obs, "Create issue", ("button",), exact=True)
    yield answer("")


def _solve_issue_button(button: str, state_tab: str | None) -> Callable[[TaskConfig], Script]:
    def solve(task: TaskConfig) -> Script:
        slots = _slots(task)
        obs = yield None
        obs = yield from go_to_item(obs, slots["project"], "issues", slots["title"], state_tab)
        obs = yield click(obs, button, ("button",), exact=True)
        yield answer("")
    return solve


def solve_star(task: TaskConfig) -> Script:
    obs = yield None
    obs = yield from go_to_project(obs, _slots(task)["project"])
    obs = yield click(obs, "Star", ("button",), exact=True)
    yield answer("")


def _solve_note(section: str) -> Callable[[TaskConfig], Script]:
    def solve(task: TaskConfig) -> Script:
        slots = _slots(task)
        obs = yield None
        obs = yield from go_to_item(obs, slots["project"], section, slots["title"])
        obs = yield type_text(obs, "Write a comment", slots["content"])
        obs = yield click(obs, "Comment", ("button",), exact=True)
        yield answer("")
    return solve


def solve_invite(task: TaskConfig) -> Script:
    slots = _slots(task)
    obs = yield None
    obs = yield from go_to_project(obs, slots["project"])
    obs = yield click(obs, "Members", ("a",), exact=True)
    obs = yield click(obs, "Invite members", ("button",), exact=True)
    obs = yield type_text(obs, "Username", slots["user"])
    obs = yield select(obs, slots["role"])
    obs = yield click(obs, "Invite", ("button",), exact=True)
    yield answer("")


# Templates --------------------------------------------------------------------------------------------

def _section_url(inst: dict[str, Any], section: str) -> str:
    return f"{_project_url(inst)}/-/{section}"


TEMPLATES: list[Template] = [
    Template(
        id=400, site="gitlab", kind="nav", intent_template="Show me the open issues of the {{project}} project",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(data, rng)],
        evaluation=lambda inst, data: url_match(_section_url(inst, "issues")),
        solver=_solve_project_section("Issues"), start_url="/explore", require_login=True,
    ),
    Template(
        id=401, site="gitlab", kind="nav", intent_template="Show me the merge requests of the {{project}} project",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(data, rng)],
        evaluation=lambda inst, data: url_match(_section_url(inst, "merge_requests")),
        solver=_solve_project_section("Merge requests"), start_url="/explore", require_login=True,
    ),
    Template(
        id=402, site="gitlab", kind="nav", intent_template="Show me the members of the {{project}} project",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(data, rng)],
        evaluation=lambda inst, data: url_match(_section_url(inst, "project_members")),
        solver=_solve_project_section("Members"), start_url="/explore", require_login=True,
    ),
    Template(
        id=403, site="gitlab", kind="nav", intent_template="Show me the closed issues of the {{project}} project",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(data, rng)],
        evaluation=lambda inst, data: url_match(_section_url(inst, "issues") + "?state=closed"),
        solver=_solve_project_section("Issues", "Closed"), start_url="/{_ns}/{_path}", require_login=True,
    ),
    Template(
        id=404, site="gitlab", kind="nav",
        intent_template="Show me the issues with the label {{label}} in the {{project}} project",
        sample=lambda data, rng: [
            _project_inst(p, label=label) for p in _projects(data, rng)
            for label in rng.sample(sorted(r["name"] for r in data.rows(
                DB, "SELECT name FROM labels WHERE project_id = ?", p["id"])), 2)],
        evaluation=lambda inst, data: url_match(
            _section_url(inst, "issues") + "?label_name%5B%5D=" + quote(inst["label"])),
        solver=solve_label_filter, start_url="/{_ns}/{_path}/-/issues", require_login=True,
    ),
    Template(
        id=405, site="gitlab", kind="nav",
        intent_template="Show me the merged merge requests of the {{project}} project",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(data, rng)],
        evaluation=lambda inst, data: url_match(_section_url(inst, "merge_requests") + "?state=merged"),
        solver=_solve_project_section("Merge requests", "Merged"), start_url="/{_ns}/{_path}", require_login=True,
    ),
    Template(
        id=406, site="gitlab", kind="info", intent_template="How many open issues does the {{project}} project have?",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(data, rng)],
        evaluation=lambda inst, data: string_match(exact_match=str(inst["_n_open_issues"])),
        solver=_solve_project_number(r"Issues (\d+) open"), start_url="/explore", require_login=True,
    ),
    Template(
        id=407, site="gitlab", kind="info", intent_template="How many stars does the {{project}} project have?",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(data, rng)],
        evaluation=lambda inst, data: string_match(exact_match=str(inst["_n_stars"])),
        solver=_solve_project_number(r"(\d+) stars"), start_url="/explore", require_login=True,
    ),
    Template(
        id=408, site="gitlab", kind="info",
        intent_template='Who opened the issue "{{title}}" in the {{project}} project?',
        sample=lambda data, rng: [_item_inst(r, "issues") for r in _items(data, rng, "issues", "i.state = 'opened'")],
        evaluation=lambda inst, data: string_match(exact_match=inst["_author_name"]),
        solver=_solve_item_fact("issues", r"created \S+ by (.+?) (?:Close|Reopen) issue"),
        start_url="/{_ns}/{_path}/-/issues", require_login=True,
    ),
    Template(
        id=409, site="gitlab", kind="info",
        intent_template='Who is assigned to the issue "{{title}}" in the {{project}} project?',
        sample=lambda data, rng: [_item_inst(r, "issues") for r in _items(
            data, rng, "issues", "i.state = 'opened' AND i.assignee_id IS NOT NULL")],
        evaluation=lambda inst, data: string_match(exact_match=inst["_assignee_name"]),
        solver=_solve_item_fact("issues", r"Assignee: (.+?) @"),
        start_url="/{_ns}/{_path}/-/issues", require_login=True,
    ),
    Template(
        id=410, site="gitlab", kind="info", intent_template="What is the role of {{user}} in the {{project}} project?",
        sample=_members,
        evaluation=lambda inst, data: string_match(exact_match=inst["_role"]),
        solver=solve_member_role, start_url="/{_ns}/{_path}", require_login=True,
    ),
    Template(
        id=411, site="gitlab", kind="info",
        intent_template='Who is the reviewer of the merge request "{{title}}" in the {{project}} project?',
        sample=lambda data, rng: [_item_inst(r, "merge_requests") for r in _items(
            data, rng, "merge_requests", "i.state = 'opened' AND i.reviewer_id IS NOT NULL")],
        evaluation=lambda inst, data: string_match(exact_match=inst["_reviewer_name"]),
        solver=_solve_item_fact("merge_requests", r"Reviewer: (.+?) @"),
        start_url="/{_ns}/{_path}/-/merge_requests", require_login=True,
    ),
    Template(
        id=412, site="gitlab", kind="mutate",
        intent_template='Create an issue titled "{{title}}" in the {{project}} project',
        sample=lambda data, rng: [_project_inst(p, title=t) for p in _projects(data, rng)
                                  for t in rng.sample(NEW_ISSUE_TITLES, 2)],
        evaluation=lambda inst, data: program_html(
            html_check(_section_url(inst, "issues"), FIRST_ISSUE_LOCATOR, exact_match=inst["title"])),
        solver=solve_new_issue, start_url="/{_ns}/{_path}", require_login=True,
    ),
    Template(
        id=413, site="gitlab", kind="mutate", intent_template='Close the issue "{{title}}" in the {{project}} project',
        sample=lambda data, rng: [_item_inst(r, "issues") for r in _items(data, rng, "issues", "i.state = 'opened'")],
        evaluation=lambda inst, data: program_html(html_check(inst["_url"], STATUS_LOCATOR, exact_match="Closed")),
        solver=_solve_issue_button("Close issue", None), start_url="/{_ns}/{_path}/-/issues", require_login=True,
    ),
    Template(
        id=414, site="gitlab", kind="mutate",
        intent_template='Reopen the closed issue "{{title}}" in the {{project}} project',
        sample=lambda data, rng: [_item_inst(r, "issues") for r in _items(data, rng, "issues", "i.state = 'closed'")],
        evaluation=lambda inst, data: program_html(html_check(inst["_url"], STATUS_LOCATOR, exact_match="Open")),
        solver=_solve_issue_button("Reopen issue", "Closed"), start_url="/{_ns}/{_path}/-/issues",
        require_login=True,
    ),
    Template(
        id=415, site="gitlab", kind="mutate", intent_template="Star the {{project}} project",
        sample=lambda data, rng: [_project_inst(p) for p in _projects(
            data, rng, "p.id NOT IN (SELECT s.project_id FROM stars s JOIN users u ON u.id = s.user_id "
                       "WHERE u.username = ?)", DEFAULT_USER)],
        evaluation=lambda inst, data: program_html(html_check(_project_url(inst), STAR_LOCATOR, exact_match="Unstar")),
        solver=solve_star, start_url="/explore", require_login=True,
    ),
    Template(
        id=416, site="gitlab", kind="mutate",
        intent_template='Comment "{{content}}" on the issue "{{title}}" in the {{project}} project',
        sample=lambda data, rng: [_item_inst(r, "issues", content=rng.choice(NOTE_TEXTS))
                                  for r in _items(data, rng, "issues", "i.state = 'opened'")],
        evaluation=lambda inst, data: program_html(
            html_check(inst["_url"], LAST_NOTE_LOCATOR, exact_match=inst["content"])),
        solver=_solve_note("issues"), start_url="/{_ns}/{_path}/-/issues", require_login=True,
    ),
    Template(
        id=417, site="gitlab", kind="mutate",
        intent_template='Comment "{{content}}" on the merge request "{{title}}" in the {{project}} project',
        sample=lambda data, rng: [_item_inst(r, "merge_requests", content=rng.choice(NOTE_TEXTS))
                                  for r in _items(data, rng, "merge_requests", "i.state = 'opened'")],
        evaluation=lambda inst, data: program_html(
            html_check(inst["_url"], LAST_NOTE_LOCATOR, exact_match=inst["content"])),
        solver=_solve_note("merge_requests"), start_url="/{_ns}/{_path}/-/merge_requests", require_login=True,
    ),
    Template(
        id=418, site="gitlab", kind="mutate", intent_template="Add {{user}} to the {{project}} project as a {{role}}",
        sample=_invites,
        evaluation=lambda inst, data: program_html(html_check(
            _section_url(inst, "project_members"),
            f"document.querySelector('tr.member[data-username=\"{inst['user']}\"] .member-role').outerText",
            exact_match=inst["role"])),
        solver=solve_invite, start_url="/{_ns}/{_path}", require_login=True,
    ),
]
