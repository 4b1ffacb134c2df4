"""Seed data of the reddit and gitlab sites: deterministic per seed, realistic sizes, default accounts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from webrl.sandbox.auth import DEFAULT_ACCOUNTS, check_password
from webrl.sandbox.sites.gitlab import seed as gitlab_seed
from webrl.sandbox.sites.reddit import seed as reddit_seed

BUILDERS = {"reddit": reddit_seed.build, "gitlab": gitlab_seed.build}


def _dump(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@pytest.mark.parametrize("site", sorted(BUILDERS))
def test_same_seed_same_data_other_seed_other_data(site: str, tmp_path: Path) -> None:
    build = BUILDERS[site]
    build(tmp_path / "a.sqlite", 0)
    build(tmp_path / "b.sqlite", 0)
    build(tmp_path / "c.sqlite", 1)
    assert _dump(tmp_path / "a.sqlite") == _dump(tmp_path / "b.sqlite")
    assert _dump(tmp_path / "a.sqlite") != _dump(tmp_path / "c.sqlite")


def test_reddit_sizes_and_account(store) -> None:
    conn = sqlite3.connect(store.template_path("reddit"))
    count = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("users", "forums", "posts",
                                                                                    "comments")}
    assert count["forums"] >= 15 and count["posts"] >= 300 and count["comments"] >= 1000 and count["users"] >= 100
    # Titles are unique within a forum, so "the post X in forum F" names one post.
    assert conn.execute("SELECT COUNT(*) FROM (SELECT forum_id, title FROM posts GROUP BY 1, 2 "
                        "HAVING COUNT(*) > 1)").fetchone()[0] == 0
    username, password = DEFAULT_ACCOUNTS["reddit"]
    (stored,) = conn.execute("SELECT password_sha256 FROM users WHERE username = ?", (username,)).fetchone()
    assert check_password(password, stored) and not check_password("wrong", stored)


def test_gitlab_sizes_and_account(store) -> None:
    conn = sqlite3.connect(store.template_path("gitlab"))
    count = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("projects", "issues",
                                                                                    "merge_requests", "notes")}
    assert count["projects"] >= 20 and count["issues"] >= 400 and count["merge_requests"] >= 100
    assert conn.execute("SELECT COUNT(*) FROM (SELECT project_id, title FROM issues GROUP BY 1, 2 "
                        "HAVING COUNT(*) > 1)").fetchone()[0] == 0
    # iids count from 1 per project with no gaps, as GitLab numbers them.
    for project_id, n, top in conn.execute("SELECT project_id, COUNT(*), MAX(iid) FROM issues GROUP BY 1"):
        assert n == top, project_id
    username, password = DEFAULT_ACCOUNTS["gitlab"]
    (stored,) = conn.execute("SELECT password_sha256 FROM users WHERE username = ?", (username,)).fetchone()
    assert check_password(password, stored)
