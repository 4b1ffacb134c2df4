"""gitlab site: pages render, lists filter and paginate, forms change state, bad input is refused."""

from __future__ import annotations

import re

import pytest

from webrl.sandbox.auth import DEFAULT_ACCOUNTS

PROJECT = "/a11yproject/a11yproject.com"


@pytest.mark.parametrize("path", [
    "/explore", "/explore?sort=stars_desc", "/dashboard/projects", "/dashboard/projects/starred",
    "/dashboard/issues", "/dashboard/merge_requests?reviewer_username=byteblaze", "/byteblaze", "/primer",
    PROJECT, f"{PROJECT}/-/issues", f"{PROJECT}/-/issues?state=closed", f"{PROJECT}/-/issues?state=all",
    f"{PROJECT}/-/issues?label_name[]=bug", f"{PROJECT}/-/issues/1", f"{PROJECT}/-/issues/new",
    f"{PROJECT}/-/merge_requests", f"{PROJECT}/-/merge_requests?state=merged", f"{PROJECT}/-/merge_requests/1",
    f"{PROJECT}/-/project_members", "/users/sign_in",
])
def test_pages_render(client, path: str) -> None:
    response = client("gitlab").get(path)
    assert response.status_code == 200, response.text[-300:]
    assert "GitLab" in response.text


def test_issue_list_counts_filters_and_pages(client, site_data) -> None:
    open_count = site_data.value("gitlab", "SELECT COUNT(*) FROM issues i JOIN projects p ON p.id = i.project_id "
                                           "WHERE p.namespace = 'a11yproject' AND p.path = 'a11yproject.com' "
                                           "AND i.state = 'opened'")
    c = client("gitlab")
    page = c.get(f"{PROJECT}/-/issues").text
    assert re.search(r'Open <span class="badge">(\d+)<', page).group(1) == str(open_count)
    assert page.count('class="issue-title"') == min(20, open_count)
    labelled = c.get(f"{PROJECT}/-/issues?state=all&label_name[]=bug").text
    for iid in re.findall(r'data-iid="(\d+)"', labelled):
        assert ">bug<" in c.get(f"{PROJECT}/-/issues/{iid}").text
    if open_count > 20:
        assert 'rel="next"' in page
        assert c.get(f"{PROJECT}/-/issues?page=2").text.count('class="issue-title"') == open_count - 20


def test_bad_input_is_refused(client) -> None:
    c = client("gitlab")
    assert c.get(f"{PROJECT}/-/issues?state=weird").status_code == 422
    assert c.get(f"{PROJECT}/-/issues?sort=nope").status_code == 422
    assert c.get("/explore?page=-1").status_code == 422
    assert c.get("/nobody/nothing").status_code == 404
    assert c.get(f"{PROJECT}/-/issues/99999").status_code == 404
    assert c.post(f"{PROJECT}/-/issues", data={"title": ""}).status_code == 422


def test_sign_in_form(client) -> None:
    c = client("gitlab", login=False)
    assert c.get("/dashboard/projects").url.path == "/login"
    username, password = DEFAULT_ACCOUNTS["gitlab"]
    assert c.post("/users/sign_in", data={"username": username, "password": "x"}).status_code == 422
    ok = c.post("/users/sign_in", data={"username": username, "password": password, "next": "/dashboard/projects"})
    assert ok.url.path == "/dashboard/projects" and "byteblaze" in ok.text


def test_issue_lifecycle(client) -> None:
    c = client("gitlab")
    created = c.post("/byteblaze/dotfiles/-/issues", data={"title": "Fish shell support", "label": "enhancement"})
    assert created.status_code == 200 and "Fish shell support" in created.text and ">enhancement<" in created.text
    path = created.url.path
    listing = c.get("/byteblaze/dotfiles/-/issues").text
    assert re.search(r'class="issue-title" href="[^"]+">([^<]+)<', listing).group(1) == "Fish shell support"
    noted = c.post(f"{path}/notes", data={"note": "Working on it"}).text
    assert noted.rsplit('class="timeline-discussion-body">', 1)[1].startswith("Working on it")
    assert "issuable-status-badge\">Closed" in c.post(f"{path}/close").text
    assert "issuable-status-badge\">Open" in c.post(f"{path}/reopen").text


def test_star_and_invite(client) -> None:
    c = client("gitlab")
    page = c.get("/byteblaze/dotfiles").text
    stars = int(re.search(r'star-count">(\d+)<', page).group(1))
    starred = c.post("/byteblaze/dotfiles/-/toggle_star").text
    assert "Unstar" in starred and f'star-count">{stars + 1}<' in starred
    invited = c.post("/byteblaze/dotfiles/-/project_members", data={"username": "vinta", "access_level": "30"}).text
    assert re.search(r'data-username="vinta">.*?member-role">Developer<', invited, re.S)
    assert c.post("/byteblaze/dotfiles/-/project_members",
                  data={"username": "vinta", "access_level": "99"}).status_code == 422
    assert "Invite members" in c.get("/byteblaze/dotfiles/-/project_members").text  # byteblaze owns dotfiles
    other = client("gitlab", login=False)
    assert other.post("/byteblaze/dotfiles/-/project_members",
                      data={"username": "vinta", "access_level": "30"}).url.path == "/login"
