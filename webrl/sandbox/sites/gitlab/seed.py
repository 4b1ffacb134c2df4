"""Seed data for the ``gitlab`` sandbox site (a GitLab-like code host, as in WebArena).

``build(db_path, seed)`` writes a SQLite file with users, projects, members, labels, issues, merge requests,
notes (comments) and stars, generated deterministically from ``seed``. Dates are fixed offsets from
:data:`EPOCH`, never the wall clock.
"""

from __future__ import annotations

import random
import re
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

from webrl.sandbox.auth import DEFAULT_ACCOUNTS, hash_password

EPOCH = datetime(2023, 3, 1, 12, 0, 0)  # seed timestamps lie in the 600 days before this
SEED_DAYS = 600
DEFAULT_USER, DEFAULT_PASSWORD = DEFAULT_ACCOUNTS["gitlab"]  # the account tasks log in as
ISSUES_PER_PROJECT = (8, 46)
MRS_PER_PROJECT = (3, 18)
NOTES_PER_ITEM = (0, 6)

#: GitLab's access levels (docs.gitlab.com, "Roles and permissions").
ACCESS_LEVELS: dict[int, str] = {10: "Guest", 20: "Reporter", 30: "Developer", 40: "Maintainer", 50: "Owner"}

SCHEMA = """
CREATE TABLE users (
    id INTEGER PRIMARY KEY, username TEXT NOT NULL UNIQUE, name TEXT NOT NULL, password_sha256 TEXT NOT NULL,
    bio TEXT NOT NULL DEFAULT '', created TEXT NOT NULL
);
CREATE TABLE groups (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, name TEXT NOT NULL, description TEXT);
CREATE TABLE projects (
    id INTEGER PRIMARY KEY, namespace TEXT NOT NULL, path TEXT NOT NULL, name TEXT NOT NULL,
    description TEXT NOT NULL, language TEXT NOT NULL, default_branch TEXT NOT NULL DEFAULT 'main',
    forks INTEGER NOT NULL DEFAULT 0, created TEXT NOT NULL, updated TEXT NOT NULL,
    UNIQUE (namespace, path)
);
CREATE TABLE members (
    project_id INTEGER NOT NULL REFERENCES projects(id), user_id INTEGER NOT NULL REFERENCES users(id),
    access_level INTEGER NOT NULL, created TEXT NOT NULL, PRIMARY KEY (project_id, user_id)
);
CREATE TABLE stars (
    user_id INTEGER NOT NULL REFERENCES users(id), project_id INTEGER NOT NULL REFERENCES projects(id),
    PRIMARY KEY (user_id, project_id)
);
CREATE TABLE labels (
    id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES projects(id), name TEXT NOT NULL,
    color TEXT NOT NULL, description TEXT NOT NULL DEFAULT ''
);
CREATE TABLE issues (
    id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES projects(id), iid INTEGER NOT NULL,
    title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', author_id INTEGER NOT NULL REFERENCES users(id),
    assignee_id INTEGER REFERENCES users(id), state TEXT NOT NULL CHECK (state IN ('opened', 'closed')),
    created TEXT NOT NULL, updated TEXT NOT NULL, closed TEXT, UNIQUE (project_id, iid)
);
CREATE TABLE issue_labels (
    issue_id INTEGER NOT NULL REFERENCES issues(id), label_id INTEGER NOT NULL REFERENCES labels(id),
    PRIMARY KEY (issue_id, label_id)
);
CREATE TABLE merge_requests (
    id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL REFERENCES projects(id), iid INTEGER NOT NULL,
    title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', author_id INTEGER NOT NULL REFERENCES users(id),
    assignee_id INTEGER REFERENCES users(id), reviewer_id INTEGER REFERENCES users(id),
    state TEXT NOT NULL CHECK (state IN ('opened', 'merged', 'closed')), source_branch TEXT NOT NULL,
    target_branch TEXT NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL, UNIQUE (project_id, iid)
);
CREATE TABLE notes (
    id INTEGER PRIMARY KEY, noteable_type TEXT NOT NULL CHECK (noteable_type IN ('issue', 'merge_request')),
    noteable_id INTEGER NOT NULL, author_id INTEGER NOT NULL REFERENCES users(id), body TEXT NOT NULL,
    created TEXT NOT NULL
);
CREATE INDEX notes_target ON notes(noteable_type, noteable_id, created);
"""

GROUPS: dict[str, tuple[str, str]] = {
    "a11yproject": ("The A11Y Project", "A community-driven effort to make digital accessibility easier."),
    "primer": ("Primer", "Design system and components."),
    "openbase": ("OpenBase", "Open source data tools."),
    "mlops-lab": ("MLOps Lab", "Machine learning infrastructure experiments."),
    "webtools": ("Web Tools", "Small utilities for the web."),
}

# (namespace, path, name, description, language)
PROJECTS: list[tuple[str, str, str, str, str]] = [
    ("byteblaze", "dotfiles", "dotfiles", "My shell, vim and tmux configuration.", "Shell"),
    ("byteblaze", "a11y-webring.club", "a11y-webring.club", "A webring for digital accessibility blogs.", "HTML"),
    ("byteblaze", "cloud-notes", "cloud-notes", "A tiny note taking app that syncs to the cloud.", "TypeScript"),
    ("byteblaze", "timetracker", "timetracker", "Command line time tracking for freelancers.", "Python"),
    ("a11yproject", "a11yproject.com", "a11yproject.com", "The A11Y Project website and checklist.", "JavaScript"),
    ("a11yproject", "a11y-syntax-highlighting", "a11y-syntax-highlighting",
     "Accessible syntax highlighting color themes.", "CSS"),
    ("primer", "design", "design", "Primer design guidelines, principles and patterns.", "MDX"),
    ("primer", "octicons", "octicons", "A scalable set of icons handcrafted for the web.", "JavaScript"),
    ("primer", "css", "css", "The CSS implementation of the Primer design system.", "SCSS"),
    ("openbase", "csvkit-lite", "csvkit-lite", "Fast tools for converting and querying CSV files.", "Python"),
    ("openbase", "geo-tiles", "geo-tiles", "Vector map tiles served from a single binary.", "Go"),
    ("openbase", "sql-formatter", "sql-formatter", "A formatter for SQL queries in many dialects.", "Rust"),
    ("openbase", "datasette-charts", "datasette-charts", "Charts plugin for Datasette.", "JavaScript"),
    ("mlops-lab", "feature-store", "feature-store", "A minimal feature store backed by Parquet.", "Python"),
    ("mlops-lab", "model-registry", "model-registry", "Versioned storage for trained models.", "Python"),
    ("mlops-lab", "gpu-scheduler", "gpu-scheduler", "A fair-share scheduler for shared GPU clusters.", "Go"),
    ("webtools", "link-checker", "link-checker", "Find broken links on your website.", "Rust"),
    ("webtools", "image-resizer", "image-resizer", "Resize and compress images on upload.", "Node.js"),
    ("webtools", "cookie-banner", "cookie-banner", "A lightweight, accessible cookie consent banner.", "JavaScript"),
    ("webtools", "static-search", "static-search", "Client-side search for static websites.", "TypeScript"),
    ("kkroening", "ffmpeg-python", "ffmpeg-python", "Python bindings for FFmpeg with complex filtering.", "Python"),
    ("yjlou", "2019-nCov", "2019-nCov", "Data and charts about the 2019 coronavirus outbreak.", "Jupyter Notebook"),
    ("keycloak", "keycloak-themes", "keycloak-themes", "Custom login themes for Keycloak.", "FreeMarker"),
    ("vinta", "awesome-python", "awesome-python", "A curated list of awesome Python frameworks and libraries.",
     "Python"),
]

LABELS: list[tuple[str, str, str]] = [
    ("bug", "#d9534f", "Something is not working"),
    ("enhancement", "#5cb85c", "New feature or request"),
    ("documentation", "#428bca", "Improvements or additions to documentation"),
    ("question", "#d1d100", "Further information is requested"),
    ("good first issue", "#7057ff", "Good for newcomers"),
    ("accessibility", "#8e44ad", "Accessibility problems"),
    ("performance", "#f0ad4e", "Speed and memory use"),
    ("help wanted", "#008672", "Extra attention is needed"),
]

ISSUE_TITLES = [
    "{component} crashes when {condition}",
    "Add support for {feature}",
    "Update documentation for {component}",
    "Typo in {doc}",
    "{component} is slow with large {things}",
    "Dark mode for {component}",
    "Broken link in {doc}",
    "Upgrade {dep} to {version}",
    "Flaky test in {component}",
    "Improve error message when {condition}",
    "Color contrast of the {ui} is too low",
    "Keyboard navigation broken in the {ui}",
    "{ui} does not work on mobile",
    "Feature request: {feature}",
    "Question: how do I configure {component}?",
]
MR_TITLES = [
    "Fix {component} crash when {condition}",
    "Add {feature}",
    "Bump {dep} from {version} to {version2}",
    "Refactor {component}",
    "Docs: update {doc}",
    "Improve {ui} accessibility",
    "Draft: {feature}",
    "Speed up {component} for large {things}",
]
FILLERS: dict[str, list[str]] = {
    "component": ["the parser", "the CLI", "the login page", "the settings page", "the search index",
                  "the exporter", "the config loader", "the cache", "the API client", "the build script",
                  "the color utility", "the sidebar", "the date picker", "the uploader"],
    "condition": ["the file is empty", "the network is offline", "a title has emoji", "the path has spaces",
                  "two users edit at once", "the token expires", "the input is not UTF-8", "JavaScript is off"],
    "feature": ["CSV export", "keyboard shortcuts", "dark mode", "a JSON API", "pagination",
                "right-to-left languages", "SAML login", "webhooks", "a plugin system", "retry with backoff",
                "reduced motion", "screen reader labels", "incremental builds"],
    "doc": ["the README", "the contributing guide", "the installation guide", "the changelog", "the FAQ",
            "the API reference"],
    "things": ["files", "tables", "repositories", "images", "queries"],
    "dep": ["eslint", "webpack", "pytest", "numpy", "serde", "tokio", "jekyll", "babel", "requests"],
    "version": ["1.4.2", "2.0.0", "3.1.0", "5.2.1", "0.9.8"],
    "version2": ["2.1.0", "3.0.0", "3.2.0", "6.0.0", "1.0.0"],
    "ui": ["navigation menu", "modal dialog", "footer", "search box", "skip link", "button styles", "tabs",
           "dropdown"],
}
DESCRIPTIONS = [
    "Steps to reproduce are in the comment below.",
    "This happens on the latest main branch.",
    "I would be happy to open a merge request for this.",
    "Expected behaviour: it should just work. Actual behaviour: it does not.",
    "See the discussion in the previous release notes.",
    "Found while testing with a screen reader.",
    "This blocks the next release.",
]
NOTES = [
    "Thanks for reporting this!", "I can reproduce this on my machine.", "Any update on this?",
    "Fixed in the latest release.", "Could you share the logs?", "LGTM", "Good idea", "Looks good to me, merging.",
    "I left a few comments on the diff.", "Can you rebase on main?", "This is a duplicate, closing.",
    "Let's discuss this in the next meeting.", "Works for me now, thanks!", "Please add a test for this.",
]
FIRST = ["Alice", "Bob", "Carlos", "Dana", "Eve", "Farah", "Gabriel", "Hana", "Igor", "Julia", "Kenji", "Lena",
         "Mateo", "Nora", "Oscar", "Priya", "Quinn", "Rosa", "Stefan", "Tara", "Umar", "Vera", "Wei", "Yusuf"]
LAST = ["Anderson", "Bauer", "Costa", "Dubois", "Eriksen", "Fischer", "Gomez", "Hughes", "Ito", "Jensen",
        "Kowalski", "Lopez", "Moreau", "Nakamura", "Okafor", "Petrov", "Quist", "Rahman", "Schmidt", "Tanaka"]
FIXED_USERS: list[tuple[str, str]] = [
    (DEFAULT_USER, "Byte Blaze"), ("kkroening", "Karl Kroening"), ("yjlou", "Yu-Jung Lou"),
    ("vinta", "Vinta Chen"), ("davepgreene", "Dave Greene"), ("ericwbailey", "Eric Bailey"),
    ("keycloak", "Keycloak Bot"), ("abisubramanya27", "Abishek Subramanya"),
]
N_USERS = 64



def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S")


def _fill(template: str, rng: random.Random) -> str:
    text = re.sub(r"\{(\w+)\}", lambda m: rng.choice(FILLERS[m.group(1)]), template)
    return text[0].upper() + text[1:]


def _insert_users(conn: sqlite3.Connection, rng: random.Random) -> None:
    people = list(FIXED_USERS)
    while len(people) < N_USERS:
        first, last = rng.choice(FIRST), rng.choice(LAST)
        username = rng.choice([f"{first}{last}".lower(), f"{first[0]}{last}".lower(), f"{first}.{last}".lower(),
                               f"{first.lower()}{rng.randrange(1, 99)}"])
        if username not in {u for u, _ in people}:
            people.append((username, f"{first} {last}"))
    for i, (username, name) in enumerate(people, start=1):
        created = EPOCH - timedelta(days=SEED_DAYS + rng.uniform(0, 1500))
        conn.execute("INSERT INTO users VALUES (?, ?, ?, ?, ?, ?)",
                     (i, username, name, hash_password(DEFAULT_PASSWORD), "", _stamp(created)))


def _insert_members(conn: sqlite3.Connection, rng: random.Random, project_id: int, owner_id: int | None) -> list[int]:
    """Members of one project; returns their user ids. The namespace's user (if any) is its Owner."""
    created = _stamp(EPOCH - timedelta(days=SEED_DAYS))
    members = rng.sample(range(1, N_USERS + 1), rng.randrange(3, 12))
    if owner_id is not None:
        members = [owner_id, *(m for m in members if m != owner_id)]
    elif 1 not in members and rng.random() < 0.5:
        members.append(1)  # byteblaze belongs to about half the group projects
    for index, user_id in enumerate(members):
        level = 50 if index == 0 else rng.choice([10, 20, 30, 30, 30, 40])
        conn.execute("INSERT INTO members VALUES (?, ?, ?, ?)", (project_id, user_id, level, created))
    return members


def _insert_notes(conn: sqlite3.Connection, rng: random.Random, kind: str, target: int, after: datetime,
                  people: list[int]) -> datetime:
    when = after
    for _ in range(rng.randrange(*NOTES_PER_ITEM)):
        when = when + timedelta(hours=rng.uniform(1, 200))
        conn.execute("INSERT INTO notes (noteable_type, noteable_id, author_id, body, created) VALUES (?,?,?,?,?)",
                     (kind, target, rng.choice(people), rng.choice(NOTES), _stamp(min(when, EPOCH))))
    return min(when, EPOCH)


def _insert_issues(conn: sqlite3.Connection, rng: random.Random, project_id: int, members: list[int],
                   label_ids: list[int]) -> None:
    titles: list[str] = []
    want = rng.randrange(*ISSUES_PER_PROJECT)
    for _ in range(want * 20):
        if len(titles) >= want:
            break
        title = _fill(rng.choice(ISSUE_TITLES), rng)
        if title not in titles:
            titles.append(title)
    created_times = sorted(EPOCH - timedelta(days=rng.uniform(0, SEED_DAYS)) for _ in titles)
    for iid, (title, created) in enumerate(zip(titles, created_times, strict=True), start=1):
        author = rng.choice(members) if rng.random() < 0.6 else rng.randrange(1, N_USERS + 1)
        assignee = rng.choice(members) if rng.random() < 0.6 else None
        state = "closed" if rng.random() < 0.35 else "opened"
        cur = conn.execute(
            "INSERT INTO issues (project_id, iid, title, description, author_id, assignee_id, state, created, "
            "updated) VALUES (?,?,?,?,?,?,?,?,?)",
            (project_id, iid, title, rng.choice(DESCRIPTIONS), author, assignee, state, _stamp(created),
             _stamp(created)),
        )
        issue_id = int(cur.lastrowid or 0)
        for label_id in rng.sample(label_ids, rng.choice([0, 1, 1, 1, 2])):
            conn.execute("INSERT INTO issue_labels VALUES (?, ?)", (issue_id, label_id))
        last = _insert_notes(conn, rng, "issue", issue_id, created, [*members, author])
        closed = _stamp(last + timedelta(hours=1)) if state == "closed" else None
        conn.execute("UPDATE issues SET updated = ?, closed = ? WHERE id = ?", (_stamp(last), closed, issue_id))


def _insert_merge_requests(conn: sqlite3.Connection, rng: random.Random, project_id: int,
                           members: list[int]) -> None:
    titles: list[str] = []
    want = rng.randrange(*MRS_PER_PROJECT)
    for _ in range(want * 20):
        if len(titles) >= want:
            break
        title = _fill(rng.choice(MR_TITLES), rng)
        if title not in titles:
            titles.append(title)
    created_times = sorted(EPOCH - timedelta(days=rng.uniform(0, SEED_DAYS)) for _ in titles)
    for iid, (title, created) in enumerate(zip(titles, created_times, strict=True), start=1):
        author = rng.choice(members)
        reviewer = rng.choice([m for m in members if m != author] or members)
        state = rng.choice(["opened", "opened", "merged", "merged", "closed"])
        branch = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40]
        cur = conn.execute(
            "INSERT INTO merge_requests (project_id, iid, title, description, author_id, assignee_id, reviewer_id, "
            "state, source_branch, target_branch, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (project_id, iid, title, rng.choice(DESCRIPTIONS), author, author, reviewer, state, branch, "main",
             _stamp(created), _stamp(created)),
        )
        mr_id = int(cur.lastrowid or 0)
        last = _insert_notes(conn, rng, "merge_request", mr_id, created, members)
        conn.execute("UPDATE merge_requests SET updated = ? WHERE id = ?", (_stamp(last), mr_id))


def _insert_projects(conn: sqlite3.Connection, rng: random.Random) -> None:
    user_ids = {row[0]: row[1] for row in conn.execute("SELECT username, id FROM users")}
    for path, (name, description) in GROUPS.items():
        conn.execute("INSERT INTO groups (path, name, description) VALUES (?, ?, ?)", (path, name, description))
    for project_id, (namespace, path, name, description, language) in enumerate(PROJECTS, start=1):
        created = EPOCH - timedelta(days=SEED_DAYS + rng.uniform(0, 700))
        conn.execute(
            "INSERT INTO projects VALUES (?, ?, ?, ?, ?, ?, 'main', ?, ?, ?)",
            (project_id, namespace, path, name, description, language, rng.randrange(0, 40), _stamp(created),
             _stamp(EPOCH - timedelta(days=rng.uniform(0, 60)))),
        )
        members = _insert_members(conn, rng, project_id, user_ids.get(namespace))
        label_ids = []
        for label, color, label_description in LABELS:
            cur = conn.execute("INSERT INTO labels (project_id, name, color, description) VALUES (?, ?, ?, ?)",
                               (project_id, label, color, label_description))
            label_ids.append(int(cur.lastrowid or 0))
        _insert_issues(conn, rng, project_id, members, label_ids)
        _insert_merge_requests(conn, rng, project_id, members)
        for user_id in rng.sample(range(2, N_USERS + 1), int(rng.paretovariate(1.2) * 2) % (N_USERS - 1)):
            conn.execute("INSERT INTO stars VALUES (?, ?)", (user_id, project_id))


def build(db_path: Path, seed: int) -> None:
    """Write the gitlab template database at ``db_path`` (replaced if present), deterministic in ``seed``."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if db_path.exists():
        db_path.unlink()
    rng = random.Random(f"gitlab-{seed}")
    conn = sqlite3.connect(db_path)
    try:
        conn.executescript(SCHEMA)
        _insert_users(conn, rng)
        _insert_projects(conn, rng)
        # byteblaze stars a few projects already, so "my starred projects" is not empty.
        for project_id in (5, 7, 21):
            conn.execute("INSERT OR IGNORE INTO stars VALUES (1, ?)", (project_id,))
        conn.commit()
    finally:
        conn.close()
