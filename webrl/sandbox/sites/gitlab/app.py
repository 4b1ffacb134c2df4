"""The ``gitlab`` sandbox site: a GitLab-like code host (WebArena's gitlab), server-rendered.

URL shapes follow GitLab: ``/explore``, ``/dashboard/projects[/starred]``, ``/dashboard/issues``,
``/dashboard/merge_requests``, ``/<namespace>``, ``/<namespace>/<project>``, ``/<ns>/<project>/-/issues``
(``state``, ``sort``, ``label_name[]``, ``assignee_username``, ``author_username``, ``search``, ``page``),
``/-/issues/<iid>``, ``/-/issues/new``, ``/-/merge_requests[/<iid>]``, ``/-/project_members``. Every list
shows :data:`PAGE_SIZE` items with ``?page=N`` pagination.
"""

from __future__ import annotations

import math
import sqlite3
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from webrl.sandbox.site import SiteContext
from webrl.sandbox.sites.gitlab.seed import ACCESS_LEVELS

PAGE_SIZE = 20  # GitLab's default page size (first_page_size=20 in WebArena's URLs)
MAINTAINER = 40  # GitLab: inviting members needs the Maintainer role or higher
ISSUE_SORTS = {
    "created_date": "i.created DESC, i.iid DESC",
    "created_asc": "i.created ASC, i.iid ASC",
    "updated_desc": "i.updated DESC, i.iid DESC",
}
PROJECT_SORTS = {
    "latest_activity_desc": "p.updated DESC",
    "name_asc": "p.name COLLATE NOCASE ASC",
    "stars_desc": "n_stars DESC, p.name COLLATE NOCASE ASC",
    "created_desc": "p.created DESC",
}
ITEM_STATES = {"issues": ("opened", "closed", "all"), "merge_requests": ("opened", "merged", "closed", "all")}
MAX_TITLE = 255  # GitLab's issue title limit
MAX_TEXT = 10000

PROJECT_COLUMNS = """
    p.*, (SELECT COUNT(*) FROM stars s WHERE s.project_id = p.id) AS n_stars,
    (SELECT COUNT(*) FROM issues i WHERE i.project_id = p.id AND i.state = 'opened') AS n_open_issues,
    (SELECT COUNT(*) FROM merge_requests m WHERE m.project_id = p.id AND m.state = 'opened') AS n_open_mrs,
    (SELECT COUNT(*) FROM members mb WHERE mb.project_id = p.id) AS n_members
"""


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def _bad(field: str, message: str) -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["query", field], "msg": message}])


def _page(request: Request) -> int:
    raw = request.query_params.get("page", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise _bad("page", "page must be a positive integer")
    return int(raw)


def _pages(total: int, page: int) -> dict[str, int]:
    return {"page": page, "pages": max(1, math.ceil(total / PAGE_SIZE)), "total": total}


def _page_url(request: Request, page: int) -> str:
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "page"] + [("page", str(page))]
    return f"{request.url.path}?{urlencode(params)}"


def _user_row(conn: sqlite3.Connection, username: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM users WHERE username = ?", (username,)).fetchone()


def _project(conn: sqlite3.Connection, namespace: str, path: str) -> sqlite3.Row:
    row = conn.execute(f"SELECT {PROJECT_COLUMNS} FROM projects p WHERE p.namespace = ? AND p.path = ?",
                       (namespace, path)).fetchone()
    if row is None:
        raise HTTPException(404, f"project {namespace}/{path} not found")
    return row


def _access_level(conn: sqlite3.Connection, project_id: int, username: str | None) -> int:
    if username is None:
        return 0
    row = conn.execute("SELECT m.access_level FROM members m JOIN users u ON u.id = m.user_id "
                       "WHERE m.project_id = ? AND u.username = ?", (project_id, username)).fetchone()
    return int(row["access_level"]) if row else 0


def _starred(conn: sqlite3.Connection, project_id: int, username: str | None) -> bool:
    if username is None:
        return False
    return conn.execute("SELECT 1 FROM stars s JOIN users u ON u.id = s.user_id WHERE s.project_id = ? "
                        "AND u.username = ?", (project_id, username)).fetchone() is not None


def _project_list(conn: sqlite3.Connection, request: Request, where: str, args: tuple,
                  default_sort: str) -> dict[str, Any]:
    sort = request.query_params.get("sort", default_sort)
    if sort not in PROJECT_SORTS:
        raise _bad("sort", f"sort must be one of {', '.join(PROJECT_SORTS)}")
    name = request.query_params.get("name", "").strip()
    if name:
        where += " AND (p.name LIKE ? OR p.namespace LIKE ?)"
        args = (*args, f"%{name}%", f"%{name}%")
    page = _page(request)
    total = conn.execute(f"SELECT COUNT(*) FROM projects p WHERE {where}", args).fetchone()[0]
    rows = conn.execute(f"SELECT {PROJECT_COLUMNS} FROM projects p WHERE {where} ORDER BY {PROJECT_SORTS[sort]} "
                        f"LIMIT ? OFFSET ?", (*args, PAGE_SIZE, (page - 1) * PAGE_SIZE)).fetchall()
    return {"items": rows, "sort": sort, "name": name, **_pages(total, page)}


def _add_dashboard_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/", response_class=RedirectResponse)
    def home(request: Request) -> RedirectResponse:
        return RedirectResponse("/dashboard/projects" if ctx.current_user(request) else "/explore", status_code=302)

    @app.get("/explore", response_class=HTMLResponse)
    @app.get("/explore/projects", response_class=HTMLResponse)
    def explore(request: Request) -> HTMLResponse:
        listing = _project_list(ctx.db(request), request, "1 = 1", (), "latest_activity_desc")
        return ctx.render(request, "projects.html", heading="Explore projects", listing=listing, tab="explore",
                          page_url=lambda n: _page_url(request, n))

    @app.get("/dashboard/projects", response_class=HTMLResponse)
    def my_projects(request: Request) -> HTMLResponse:
        user = ctx.require_user(request)
        where = "p.id IN (SELECT m.project_id FROM members m JOIN users u ON u.id = m.user_id WHERE u.username = ?)"
        listing = _project_list(ctx.db(request), request, where, (user,), "latest_activity_desc")
        return ctx.render(request, "projects.html", heading="Projects", listing=listing, tab="yours",
                          page_url=lambda n: _page_url(request, n))

    @app.get("/dashboard/projects/starred", response_class=HTMLResponse)
    def starred_projects(request: Request) -> HTMLResponse:
        user = ctx.require_user(request)
        where = "p.id IN (SELECT s.project_id FROM stars s JOIN users u ON u.id = s.user_id WHERE u.username = ?)"
        listing = _project_list(ctx.db(request), request, where, (user,), "latest_activity_desc")
        return ctx.render(request, "projects.html", heading="Projects", listing=listing, tab="starred",
                          page_url=lambda n: _page_url(request, n))

    @app.get("/dashboard/issues", response_class=HTMLResponse)
    def my_issues(request: Request) -> HTMLResponse:
        return _dashboard_items(ctx, request, "issues")

    @app.get("/dashboard/merge_requests", response_class=HTMLResponse)
    def my_merge_requests(request: Request) -> HTMLResponse:
        return _dashboard_items(ctx, request, "merge_requests")


def _dashboard_items(ctx: SiteContext, request: Request, kind: str) -> HTMLResponse:
    user = ctx.require_user(request)
    params = dict(request.query_params)
    if not any(k in params for k in ("assignee_username", "author_username", "reviewer_username")):
        params["assignee_username"] = user
    listing = _items(ctx.db(request), request, kind, None, params)
    return ctx.render(request, "items.html", kind=kind, project=None, listing=listing,
                      page_url=lambda n: _page_url(request, n), state_url=lambda s: _state_url(request, s))


def _state_url(request: Request, state: str) -> str:
    params = [(k, v) for k, v in request.query_params.multi_items() if k not in ("page", "state")]
    return f"{request.url.path}?{urlencode([('state', state), *params])}"


def _item_filters(kind: str, params: dict[str, Any], labels: list[str]) -> tuple[list[str], list[Any]]:
    """SQL conditions for the list filters GitLab's issue and merge request lists take."""
    clauses: list[str] = []
    args: list[Any] = []
    for param, column in (("assignee_username", "i.assignee_id"), ("author_username", "i.author_id"),
                          ("reviewer_username", "i.reviewer_id")):
        if params.get(param) and not (param == "reviewer_username" and kind == "issues"):
            clauses.append(f"{column} = (SELECT id FROM users WHERE username = ?)")
            args.append(params[param])
    if params.get("search"):
        clauses.append("i.title LIKE ?")
        args.append(f"%{params['search']}%")
    for label in labels:
        if kind != "issues":
            raise _bad("label_name[]", "merge requests have no labels here")
        clauses.append("i.id IN (SELECT il.issue_id FROM issue_labels il JOIN labels l ON l.id = il.label_id "
                       "WHERE l.name = ?)")
        args.append(label)
    return clauses, args


def _items(conn: sqlite3.Connection, request: Request, kind: str, project: sqlite3.Row | None,
           params: dict[str, Any]) -> dict[str, Any]:
    """One page of issues or merge requests, filtered like GitLab's lists, with per-state counts."""
    state = params.get("state", "opened")
    if state not in ITEM_STATES[kind]:
        raise _bad("state", f"state must be one of {', '.join(ITEM_STATES[kind])}")
    sort = params.get("sort", "created_date")
    if sort not in ISSUE_SORTS:
        raise _bad("sort", f"sort must be one of {', '.join(ISSUE_SORTS)}")
    labels = request.query_params.getlist("label_name[]")
    clauses, args = _item_filters(kind, params, labels)
    if project is not None:
        clauses.append("i.project_id = ?")
        args.append(project["id"])
    base = " AND ".join(clauses) or "1 = 1"
    counts = {s: conn.execute(f"SELECT COUNT(*) FROM {kind} i WHERE {base} AND i.state = ?", (*args, s)).fetchone()[0]
              for s in ITEM_STATES[kind] if s != "all"}
    counts["all"] = sum(counts.values())
    where = base if state == "all" else f"{base} AND i.state = ?"
    where_args = args if state == "all" else [*args, state]
    page = _page(request)
    rows = conn.execute(
        f"SELECT i.*, a.username AS author, a.name AS author_name, s.username AS assignee, s.name AS assignee_name, "
        f"p.namespace, p.path AS project_path, "
        f"(SELECT COUNT(*) FROM notes n WHERE n.noteable_type = ? AND n.noteable_id = i.id) AS n_notes "
        f"FROM {kind} i JOIN users a ON a.id = i.author_id LEFT JOIN users s ON s.id = i.assignee_id "
        f"JOIN projects p ON p.id = i.project_id WHERE {where} ORDER BY {ISSUE_SORTS[sort]} LIMIT ? OFFSET ?",
        ("issue" if kind == "issues" else "merge_request", *where_args, PAGE_SIZE, (page - 1) * PAGE_SIZE),
    ).fetchall()
    items = [{**dict(r), "labels": _labels(conn, r["id"]) if kind == "issues" else []} for r in rows]
    return {"items": items, "state": state, "sort": sort, "labels": labels, "counts": counts,
            **_pages(counts[state], page)}


def _labels(conn: sqlite3.Connection, issue_id: int) -> list[sqlite3.Row]:
    return conn.execute("SELECT l.name, l.color FROM labels l JOIN issue_labels il ON il.label_id = l.id "
                        "WHERE il.issue_id = ? ORDER BY l.name", (issue_id,)).fetchall()


def _item(conn: sqlite3.Connection, kind: str, project_id: int, iid: int) -> sqlite3.Row:
    row = conn.execute(
        f"SELECT i.*, a.username AS author, a.name AS author_name, s.username AS assignee, s.name AS assignee_name "
        f"FROM {kind} i JOIN users a ON a.id = i.author_id LEFT JOIN users s ON s.id = i.assignee_id "
        f"WHERE i.project_id = ? AND i.iid = ?", (project_id, iid)).fetchone()
    if row is None:
        raise HTTPException(404, f"{kind.replace('_', ' ')[:-1]} #{iid} not found")
    return row


def _notes(conn: sqlite3.Connection, noteable_type: str, noteable_id: int) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT n.id, n.body, n.created, u.username AS author, u.name AS author_name FROM notes n "
        "JOIN users u ON u.id = n.author_id WHERE n.noteable_type = ? AND n.noteable_id = ? ORDER BY n.created, n.id",
        (noteable_type, noteable_id)).fetchall()


def _add_item_routes(app: FastAPI, ctx: SiteContext, kind: str) -> None:
    """List, show and comment routes of ``issues`` or ``merge_requests`` under ``/<ns>/<project>/-/``."""
    noteable = "issue" if kind == "issues" else "merge_request"

    @app.get(f"/{{namespace}}/{{project_path}}/-/{kind}", response_class=HTMLResponse, name=f"{kind}_list")
    def item_list(request: Request, namespace: str, project_path: str) -> HTMLResponse:
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        listing = _items(conn, request, kind, project, dict(request.query_params))
        label_names = [r["name"] for r in conn.execute("SELECT name FROM labels WHERE project_id = ? ORDER BY name",
                                                       (project["id"],))] if kind == "issues" else []
        return ctx.render(request, "items.html", kind=kind, project=project, listing=listing,
                          label_names=label_names, page_url=lambda n: _page_url(request, n),
                          state_url=lambda s: _state_url(request, s))

    @app.get(f"/{{namespace}}/{{project_path}}/-/{kind}/{{iid:int}}", response_class=HTMLResponse,
             name=f"{kind}_show")
    def item_show(request: Request, namespace: str, project_path: str, iid: int) -> HTMLResponse:
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        item = _item(conn, kind, project["id"], iid)
        reviewer = None
        if kind == "merge_requests" and item["reviewer_id"]:
            reviewer = conn.execute("SELECT username, name FROM users WHERE id = ?", (item["reviewer_id"],)).fetchone()
        return ctx.render(request, "item.html", kind=kind, project=project, item=item, reviewer=reviewer,
                          labels=_labels(conn, item["id"]) if kind == "issues" else [],
                          notes=_notes(conn, noteable, item["id"]))

    @app.post(f"/{{namespace}}/{{project_path}}/-/{kind}/{{iid:int}}/notes", name=f"{kind}_note")
    def item_note(request: Request, namespace: str, project_path: str, iid: int,
                  note: Annotated[str, Form(max_length=MAX_TEXT)]) -> RedirectResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        item = _item(conn, kind, project["id"], iid)
        if not note.strip():
            raise HTTPException(422, detail=[{"loc": ["body", "note"], "msg": "the comment is empty"}])
        user_row = _user_row(conn, user)
        assert user_row is not None
        now = _now()
        cur = conn.execute("INSERT INTO notes (noteable_type, noteable_id, author_id, body, created) "
                           "VALUES (?, ?, ?, ?, ?)", (noteable, item["id"], user_row["id"], note.strip(), now))
        conn.execute(f"UPDATE {kind} SET updated = ? WHERE id = ?", (now, item["id"]))
        conn.commit()
        return RedirectResponse(f"/{namespace}/{project_path}/-/{kind}/{iid}#note_{cur.lastrowid}", status_code=303)


def _add_issue_write_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/{namespace}/{project_path}/-/issues/new", response_class=HTMLResponse)
    def new_issue_form(request: Request, namespace: str, project_path: str) -> HTMLResponse:
        ctx.require_user(request)
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        return _issue_form(ctx, request, conn, project, None, {})

    @app.post("/{namespace}/{project_path}/-/issues", response_model=None)
    def create_issue(request: Request, namespace: str, project_path: str, title: Annotated[str, Form()],
                     description: Annotated[str, Form()] = "", assignee_username: Annotated[str, Form()] = "",
                     label: Annotated[str, Form()] = "") -> RedirectResponse | HTMLResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        values = {"title": title, "description": description, "assignee_username": assignee_username, "label": label}
        if not title.strip() or len(title) > MAX_TITLE:
            return _issue_form(ctx, request, conn, project, f"Title must be 1 to {MAX_TITLE} characters.", values)
        if len(description) > MAX_TEXT:
            return _issue_form(ctx, request, conn, project, "Description is too long.", values)
        assignee = _user_row(conn, assignee_username) if assignee_username else None
        if assignee_username and assignee is None:
            return _issue_form(ctx, request, conn, project, f"No user named {assignee_username}.", values)
        label_row = conn.execute("SELECT id FROM labels WHERE project_id = ? AND name = ?",
                                 (project["id"], label)).fetchone() if label else None
        iid = conn.execute("SELECT COALESCE(MAX(iid), 0) + 1 FROM issues WHERE project_id = ?",
                           (project["id"],)).fetchone()[0]
        author = _user_row(conn, user)
        assert author is not None
        now = _now()
        cur = conn.execute(
            "INSERT INTO issues (project_id, iid, title, description, author_id, assignee_id, state, created, "
            "updated) VALUES (?, ?, ?, ?, ?, ?, 'opened', ?, ?)",
            (project["id"], iid, title.strip(), description.strip(), author["id"],
             assignee["id"] if assignee else None, now, now))
        if label_row is not None:
            conn.execute("INSERT INTO issue_labels VALUES (?, ?)", (cur.lastrowid, label_row["id"]))
        conn.commit()
        return RedirectResponse(f"/{namespace}/{project_path}/-/issues/{iid}", status_code=303)

    @app.post("/{namespace}/{project_path}/-/issues/{iid:int}/close")
    def close_issue(request: Request, namespace: str, project_path: str, iid: int) -> RedirectResponse:
        return _set_issue_state(ctx, request, namespace, project_path, iid, "closed")

    @app.post("/{namespace}/{project_path}/-/issues/{iid:int}/reopen")
    def reopen_issue(request: Request, namespace: str, project_path: str, iid: int) -> RedirectResponse:
        return _set_issue_state(ctx, request, namespace, project_path, iid, "opened")


def _issue_form(ctx: SiteContext, request: Request, conn: sqlite3.Connection, project: sqlite3.Row,
                error: str | None, values: dict[str, str]) -> HTMLResponse:
    members = conn.execute("SELECT u.username, u.name FROM members m JOIN users u ON u.id = m.user_id "
                           "WHERE m.project_id = ? ORDER BY u.name", (project["id"],)).fetchall()
    labels = [r["name"] for r in conn.execute("SELECT name FROM labels WHERE project_id = ? ORDER BY name",
                                              (project["id"],))]
    return ctx.render(request, "issue_new.html", project=project, members=members, labels=labels, error=error,
                      values=values, status_code=422 if error else 200)


def _set_issue_state(ctx: SiteContext, request: Request, namespace: str, project_path: str, iid: int,
                     state: str) -> RedirectResponse:
    ctx.require_user(request)
    conn = ctx.db(request)
    project = _project(conn, namespace, project_path)
    item = _item(conn, "issues", project["id"], iid)
    now = _now()
    conn.execute("UPDATE issues SET state = ?, updated = ?, closed = ? WHERE id = ?",
                 (state, now, now if state == "closed" else None, item["id"]))
    conn.commit()
    return RedirectResponse(f"/{namespace}/{project_path}/-/issues/{iid}", status_code=303)


def _add_project_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/{namespace}/{project_path}/-/project_members", response_class=HTMLResponse)
    def members(request: Request, namespace: str, project_path: str) -> HTMLResponse:
        return _members_page(ctx, request, namespace, project_path, None)

    @app.post("/{namespace}/{project_path}/-/project_members", response_model=None)
    def invite(request: Request, namespace: str, project_path: str, username: Annotated[str, Form()],
               access_level: Annotated[str, Form()]) -> RedirectResponse | HTMLResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        if _access_level(conn, project["id"], user) < MAINTAINER:
            raise HTTPException(403, "only Maintainers and Owners can invite members")
        if not access_level.isdigit() or int(access_level) not in ACCESS_LEVELS:
            return _members_page(ctx, request, namespace, project_path, "Choose a role.")
        invitee = _user_row(conn, username.strip().lstrip("@"))
        if invitee is None:
            return _members_page(ctx, request, namespace, project_path, f"No user named {username}.")
        conn.execute("INSERT INTO members VALUES (?, ?, ?, ?) ON CONFLICT (project_id, user_id) "
                     "DO UPDATE SET access_level = excluded.access_level",
                     (project["id"], invitee["id"], int(access_level), _now()))
        conn.commit()
        return RedirectResponse(f"/{namespace}/{project_path}/-/project_members", status_code=303)

    @app.post("/{namespace}/{project_path}/-/toggle_star")
    def toggle_star(request: Request, namespace: str, project_path: str) -> RedirectResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        user_row = _user_row(conn, user)
        assert user_row is not None
        if _starred(conn, project["id"], user):
            conn.execute("DELETE FROM stars WHERE user_id = ? AND project_id = ?", (user_row["id"], project["id"]))
        else:
            conn.execute("INSERT INTO stars VALUES (?, ?)", (user_row["id"], project["id"]))
        conn.commit()
        return RedirectResponse(f"/{namespace}/{project_path}", status_code=303)

    @app.get("/{namespace}/{project_path}", response_class=HTMLResponse)
    def project_page(request: Request, namespace: str, project_path: str) -> HTMLResponse:
        conn = ctx.db(request)
        project = _project(conn, namespace, project_path)
        user = ctx.current_user(request)
        activity = conn.execute(
            "SELECT 'issue' AS kind, i.iid, i.title, i.updated, u.username FROM issues i JOIN users u "
            "ON u.id = i.author_id WHERE i.project_id = ? UNION ALL SELECT 'merge request', m.iid, m.title, m.updated, "
            "u.username FROM merge_requests m JOIN users u ON u.id = m.author_id WHERE m.project_id = ? "
            "ORDER BY 4 DESC LIMIT 8", (project["id"], project["id"])).fetchall()
        return ctx.render(request, "project.html", project=project, starred=_starred(conn, project["id"], user),
                          activity=activity)

    @app.get("/{namespace}", response_class=HTMLResponse)
    def namespace_page(request: Request, namespace: str) -> HTMLResponse:
        conn = ctx.db(request)
        person = _user_row(conn, namespace)
        group = conn.execute("SELECT * FROM groups WHERE path = ?", (namespace,)).fetchone()
        if person is None and group is None:
            raise HTTPException(404, f"{namespace} not found")
        projects = conn.execute(f"SELECT {PROJECT_COLUMNS} FROM projects p WHERE p.namespace = ? ORDER BY p.name",
                                (namespace,)).fetchall()
        return ctx.render(request, "namespace.html", person=person, group=group, projects=projects,
                          namespace=namespace)


def _members_page(ctx: SiteContext, request: Request, namespace: str, project_path: str,
                  error: str | None) -> HTMLResponse:
    conn = ctx.db(request)
    project = _project(conn, namespace, project_path)
    rows = conn.execute("SELECT u.username, u.name, m.access_level, m.created FROM members m JOIN users u "
                        "ON u.id = m.user_id WHERE m.project_id = ? ORDER BY m.access_level DESC, u.name",
                        (project["id"],)).fetchall()
    can_invite = _access_level(conn, project["id"], ctx.current_user(request)) >= MAINTAINER
    return ctx.render(request, "members.html", project=project, members=rows, roles=ACCESS_LEVELS,
                      can_invite=can_invite, error=error, status_code=422 if error else 200)


def _add_login_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/users/sign_in", response_class=HTMLResponse)
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = "/") -> HTMLResponse:
        return ctx.render(request, "login.html", next=next, error=None)

    @app.post("/users/sign_in", response_model=None)
    @app.post("/login", response_model=None)
    def login(request: Request, username: Annotated[str, Form()], password: Annotated[str, Form()],
              next: Annotated[str, Form()] = "/") -> RedirectResponse | HTMLResponse:
        row = _user_row(ctx.db(request), username)
        return ctx.login_attempt(request, row, password, next, error="Invalid login or password.")

    @app.post("/users/sign_out")
    def logout(request: Request) -> RedirectResponse:
        return ctx.logout_response("/users/sign_in")


def create_app(ctx: SiteContext) -> FastAPI:
    """The gitlab site's routes (see the module docstring). Fixed paths first, ``/<namespace>/...`` last."""
    app = FastAPI(title="gitlab sandbox", docs_url=None, redoc_url=None, openapi_url=None)
    _add_login_routes(app, ctx)
    _add_dashboard_routes(app, ctx)
    _add_issue_write_routes(app, ctx)
    _add_item_routes(app, ctx, "issues")
    _add_item_routes(app, ctx, "merge_requests")
    _add_project_routes(app, ctx)

    @app.exception_handler(HTTPException)
    async def error_page(request: Request, exc: HTTPException) -> HTMLResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "; ".join(d["msg"] for d in exc.detail)
        return ctx.render(request, "error.html", status_code=exc.status_code, code=exc.status_code, message=detail)

    return app
