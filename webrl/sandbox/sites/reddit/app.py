"""The ``reddit`` sandbox site: a Postmill-like forum (WebArena's reddit), server-rendered.

URL shapes follow Postmill: ``/forums``, ``/f/<forum>[/<sort>]``, ``/f/<forum>/<post_id>/<slug>``,
``/user/<name>``, ``/submit[/<forum>]``, ``/search?q=``; votes are ``POST /sv/<post_id>`` and
``POST /cv/<comment_id>`` with ``choice`` 1 or -1 (voting the same way again takes the vote back).
Every list shows :data:`PAGE_SIZE` items with ``?page=N`` pagination.
"""

from __future__ import annotations

import math
import sqlite3
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from webrl.sandbox.site import SiteContext, same_site_path
from webrl.sandbox.sites.reddit.seed import slugify

PAGE_SIZE = 20  # items per list page, as in Postmill's default listing
SORTS = ("hot", "new", "top")
HOT_DECAY_S = 45000  # reddit's published "hot" ranking: log10(score) + seconds / 45000
MAX_TITLE = 300  # Postmill's submission title limit
MAX_BODY = 10000

POST_COLUMNS = """
    p.id, p.title, p.body, p.url, p.created, f.name AS forum, u.username AS author,
    p.upvotes - p.downvotes + COALESCE((SELECT SUM(v.choice) FROM votes v
        WHERE v.kind = 'post' AND v.target_id = p.id), 0) AS score,
    (SELECT COUNT(*) FROM comments c WHERE c.post_id = p.id) AS n_comments
"""
POST_FROM = "FROM posts p JOIN forums f ON f.id = p.forum_id JOIN users u ON u.id = p.user_id"


def _hot(row: sqlite3.Row) -> float:
    """reddit's hot rank: sign(s) * log10(max(|s|, 1)) + t / 45000 (t = seconds since the epoch)."""
    score = int(row["score"])
    sign = (score > 0) - (score < 0)
    seconds = datetime.strptime(row["created"], "%Y-%m-%d %H:%M:%S").timestamp()
    return sign * math.log10(max(abs(score), 1)) + seconds / HOT_DECAY_S


def _sorted_posts(rows: list[sqlite3.Row], sort: str) -> list[sqlite3.Row]:
    if sort == "new":
        return sorted(rows, key=lambda r: (r["created"], r["id"]), reverse=True)
    if sort == "top":
        return sorted(rows, key=lambda r: (r["score"], r["created"]), reverse=True)
    return sorted(rows, key=_hot, reverse=True)


def _page(request: Request) -> int:
    raw = request.query_params.get("page", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise HTTPException(422, detail=[{"loc": ["query", "page"], "msg": "page must be a positive integer"}])
    return int(raw)


def _paginate(rows: list[Any], page: int) -> dict[str, Any]:
    pages = max(1, math.ceil(len(rows) / PAGE_SIZE))
    return {"items": rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE], "page": page, "pages": pages,
            "total": len(rows)}


def post_path(forum: str, post_id: int, title: str) -> str:
    """The canonical URL path of a post, as Postmill writes it."""
    return f"/f/{forum}/{post_id}/{slugify(title)}"


def _user_id(conn: sqlite3.Connection, username: str) -> int:
    row = conn.execute("SELECT id FROM users WHERE username = ?", (username,)).fetchone()
    if row is None:
        raise HTTPException(404, "no such user")
    return int(row["id"])


def _forum(conn: sqlite3.Connection, name: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM forums WHERE name = ? COLLATE NOCASE", (name,)).fetchone()
    if row is None:
        raise HTTPException(404, f"there is no forum named {name}")
    return row


def _post(conn: sqlite3.Connection, post_id: int) -> sqlite3.Row:
    row = conn.execute(f"SELECT {POST_COLUMNS} {POST_FROM} WHERE p.id = ?", (post_id,)).fetchone()
    if row is None:
        raise HTTPException(404, "no such post")
    return row


def _my_vote(conn: sqlite3.Connection, user: str | None, kind: str, target_id: int) -> int:
    if user is None:
        return 0
    row = conn.execute(
        "SELECT v.choice FROM votes v JOIN users u ON u.id = v.user_id "
        "WHERE u.username = ? AND v.kind = ? AND v.target_id = ?", (user, kind, target_id)).fetchone()
    return int(row["choice"]) if row else 0


def _comment_tree(conn: sqlite3.Connection, post_id: int, user: str | None) -> list[dict[str, Any]]:
    """Top-level comments in posting order, each with its replies nested under ``children``."""
    rows = conn.execute(
        "SELECT c.id, c.parent_id, c.body, c.created, u.username AS author, c.upvotes - c.downvotes + "
        "COALESCE((SELECT SUM(v.choice) FROM votes v WHERE v.kind = 'comment' AND v.target_id = c.id), 0) AS score "
        "FROM comments c JOIN users u ON u.id = c.user_id WHERE c.post_id = ? ORDER BY c.created, c.id",
        (post_id,)).fetchall()
    nodes = {r["id"]: {**dict(r), "children": [], "my_vote": _my_vote(conn, user, "comment", r["id"])} for r in rows}
    roots: list[dict[str, Any]] = []
    for r in rows:
        parent = nodes.get(r["parent_id"]) if r["parent_id"] else None
        (parent["children"] if parent else roots).append(nodes[r["id"]])
    return roots


def _apply_vote(conn: sqlite3.Connection, user: str, kind: str, target_id: int, choice: int) -> None:
    """Cast ``choice``; casting the vote the user already has takes it back (Postmill's toggle)."""
    user_id = _user_id(conn, user)
    current = _my_vote(conn, user, kind, target_id)
    conn.execute("DELETE FROM votes WHERE user_id = ? AND kind = ? AND target_id = ?", (user_id, kind, target_id))
    if current != choice:
        conn.execute("INSERT INTO votes VALUES (?, ?, ?, ?)", (user_id, kind, target_id, choice))
    conn.commit()


def _choice(value: str) -> int:
    if value not in ("1", "-1"):
        raise HTTPException(422, detail=[{"loc": ["body", "choice"], "msg": "choice must be 1 or -1"}])
    return int(value)


def _back(request: Request, fallback: str) -> RedirectResponse:
    """Back to the referring page when it is on this site, else to ``fallback``."""
    referer = urlsplit(request.headers.get("referer") or "")
    if referer.netloc != request.url.netloc:
        return RedirectResponse(fallback, status_code=303)
    path = referer.path + (f"?{referer.query}" if referer.query else "")
    return RedirectResponse(same_site_path(path, fallback), status_code=303)


def _listing(ctx: SiteContext, request: Request, sort: str, forum: sqlite3.Row | None) -> HTMLResponse:
    if sort not in SORTS:
        raise HTTPException(404, f"unknown sort {sort!r}; use one of {', '.join(SORTS)}")
    conn = ctx.db(request)
    where, args = ("WHERE p.forum_id = ?", (forum["id"],)) if forum is not None else ("", ())
    rows = _sorted_posts(conn.execute(f"SELECT {POST_COLUMNS} {POST_FROM} {where}", args).fetchall(), sort)
    listing = _paginate(rows, _page(request))
    subscribed = False
    user = ctx.current_user(request)
    if forum is not None and user is not None:
        subscribed = conn.execute(
            "SELECT 1 FROM subscriptions s JOIN users u ON u.id = s.user_id WHERE u.username = ? AND s.forum_id = ?",
            (user, forum["id"])).fetchone() is not None
    n_subscribers = 0
    if forum is not None:
        n_subscribers = conn.execute("SELECT COUNT(*) FROM subscriptions WHERE forum_id = ?",
                                     (forum["id"],)).fetchone()[0]
    return ctx.render(request, "listing.html", forum=forum, sort=sort, listing=listing, subscribed=subscribed,
                      n_subscribers=n_subscribers, post_path=post_path)


def _add_listing_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/", response_class=HTMLResponse)
    def front(request: Request) -> HTMLResponse:
        return _listing(ctx, request, "hot", None)

    @app.get("/forums", response_class=HTMLResponse)
    def forums(request: Request) -> HTMLResponse:
        rows = ctx.db(request).execute(
            "SELECT f.name, f.title, f.description, "
            "(SELECT COUNT(*) FROM subscriptions s WHERE s.forum_id = f.id) AS n_subscribers, "
            "(SELECT COUNT(*) FROM posts p WHERE p.forum_id = f.id) AS n_posts FROM forums f "
            "ORDER BY f.name COLLATE NOCASE").fetchall()
        return ctx.render(request, "forums.html", forums=rows)

    @app.get("/f/{forum_name}", response_class=HTMLResponse)
    def forum(request: Request, forum_name: str) -> HTMLResponse:
        return _listing(ctx, request, "hot", _forum(ctx.db(request), forum_name))

    @app.get("/search", response_class=HTMLResponse)
    def search(request: Request, q: str = "") -> HTMLResponse:
        words = q.split()
        rows: list[sqlite3.Row] = []
        if words:
            clause = " AND ".join("p.title LIKE ?" for _ in words)
            rows = ctx.db(request).execute(f"SELECT {POST_COLUMNS} {POST_FROM} WHERE {clause}",
                                           [f"%{w}%" for w in words]).fetchall()
        listing = _paginate(_sorted_posts(rows, "new"), _page(request))
        return ctx.render(request, "search.html", q=q, listing=listing, post_path=post_path)

    for sort in SORTS:
        _add_sort_routes(app, ctx, sort)


def _add_sort_routes(app: FastAPI, ctx: SiteContext, sort: str) -> None:
    @app.get(f"/{sort}", response_class=HTMLResponse, name=f"front_{sort}")
    def front_sorted(request: Request) -> HTMLResponse:
        return _listing(ctx, request, sort, None)

    @app.get(f"/f/{{forum_name}}/{sort}", response_class=HTMLResponse, name=f"forum_{sort}")
    def forum_sorted(request: Request, forum_name: str) -> HTMLResponse:
        return _listing(ctx, request, sort, _forum(ctx.db(request), forum_name))


def _add_post_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/f/{forum_name}/{post_id:int}", response_class=RedirectResponse)
    def post_short(request: Request, forum_name: str, post_id: int) -> RedirectResponse:
        post = _post(ctx.db(request), post_id)
        return RedirectResponse(post_path(post["forum"], post_id, post["title"]), status_code=301)

    @app.get("/f/{forum_name}/{post_id:int}/{slug}", response_class=HTMLResponse)
    def post_page(request: Request, forum_name: str, post_id: int, slug: str) -> HTMLResponse:
        conn = ctx.db(request)
        post = _post(conn, post_id)
        if post["forum"].lower() != forum_name.lower():
            raise HTTPException(404, "no such post in this forum")
        user = ctx.current_user(request)
        return ctx.render(request, "post.html", post=post, comments=_comment_tree(conn, post_id, user),
                          my_vote=_my_vote(conn, user, "post", post_id), post_path=post_path)

    @app.post("/f/{forum_name}/{post_id:int}/comment")
    def comment(request: Request, forum_name: str, post_id: int,
                body: Annotated[str, Form(max_length=MAX_BODY)]) -> RedirectResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        post = _post(conn, post_id)
        if not body.strip():
            raise HTTPException(422, detail=[{"loc": ["body", "body"], "msg": "the comment is empty"}])
        cur = conn.execute("INSERT INTO comments (post_id, user_id, body, created) VALUES (?, ?, ?, ?)",
                           (post_id, _user_id(conn, user), body.strip(), _now()))
        conn.commit()
        return RedirectResponse(f"{post_path(post['forum'], post_id, post['title'])}#comment-{cur.lastrowid}",
                                status_code=303)

    @app.post("/f/{forum_name}/{post_id:int}/delete")
    def delete_post(request: Request, forum_name: str, post_id: int) -> RedirectResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        post = _post(conn, post_id)
        if post["author"] != user:
            raise HTTPException(403, "you can only delete your own posts")
        conn.execute("DELETE FROM comments WHERE post_id = ?", (post_id,))
        conn.execute("DELETE FROM votes WHERE kind = 'post' AND target_id = ?", (post_id,))
        conn.execute("DELETE FROM posts WHERE id = ?", (post_id,))
        conn.commit()
        return RedirectResponse(f"/f/{post['forum']}", status_code=303)

    @app.post("/sv/{post_id:int}")
    def vote_post(request: Request, post_id: int, choice: Annotated[str, Form()]) -> RedirectResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        post = _post(conn, post_id)
        _apply_vote(conn, user, "post", post_id, _choice(choice))
        return _back(request, post_path(post["forum"], post_id, post["title"]))

    @app.post("/cv/{comment_id:int}")
    def vote_comment(request: Request, comment_id: int, choice: Annotated[str, Form()]) -> RedirectResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        row = conn.execute("SELECT post_id FROM comments WHERE id = ?", (comment_id,)).fetchone()
        if row is None:
            raise HTTPException(404, "no such comment")
        post = _post(conn, int(row["post_id"]))
        _apply_vote(conn, user, "comment", comment_id, _choice(choice))
        return _back(request, post_path(post["forum"], post["id"], post["title"]))


def _now() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def _add_submit_routes(app: FastAPI, ctx: SiteContext) -> None:
    def form_page(request: Request, forum_name: str | None, error: str | None = None,
                  values: dict[str, str] | None = None) -> HTMLResponse:
        ctx.require_user(request)
        names = [r["name"] for r in ctx.db(request).execute("SELECT name FROM forums ORDER BY name COLLATE NOCASE")]
        return ctx.render(request, "submit.html", forums=names, selected=forum_name, error=error,
                          values=values or {}, status_code=422 if error else 200)

    @app.get("/submit", response_class=HTMLResponse)
    def submit_form(request: Request) -> HTMLResponse:
        return form_page(request, None)

    @app.get("/submit/{forum_name}", response_class=HTMLResponse)
    def submit_form_forum(request: Request, forum_name: str) -> HTMLResponse:
        return form_page(request, _forum(ctx.db(request), forum_name)["name"])

    @app.post("/submit", response_model=None)
    def submit(request: Request, forum: Annotated[str, Form()], title: Annotated[str, Form()],
               url: Annotated[str, Form()] = "", body: Annotated[str, Form()] = "") -> RedirectResponse | HTMLResponse:
        user = ctx.require_user(request)
        conn = ctx.db(request)
        values = {"title": title, "url": url, "body": body}
        row = conn.execute("SELECT id, name FROM forums WHERE name = ?", (forum,)).fetchone()
        if row is None:
            return form_page(request, None, "Choose a forum.", values)
        if not title.strip() or len(title) > MAX_TITLE:
            return form_page(request, row["name"], f"The title must be 1 to {MAX_TITLE} characters.", values)
        if len(body) > MAX_BODY:
            return form_page(request, row["name"], f"The body must be at most {MAX_BODY} characters.", values)
        cur = conn.execute(
            "INSERT INTO posts (forum_id, user_id, title, url, body, created, upvotes, downvotes) "
            "VALUES (?, ?, ?, ?, ?, ?, 1, 0)",
            (row["id"], _user_id(conn, user), title.strip(), url.strip(), body.strip(), _now()))
        conn.commit()
        return RedirectResponse(post_path(row["name"], int(cur.lastrowid or 0), title.strip()), status_code=303)

    @app.post("/f/{forum_name}/subscribe")
    def subscribe(request: Request, forum_name: str) -> RedirectResponse:
        return _set_subscription(ctx, request, forum_name, True)

    @app.post("/f/{forum_name}/unsubscribe")
    def unsubscribe(request: Request, forum_name: str) -> RedirectResponse:
        return _set_subscription(ctx, request, forum_name, False)


def _set_subscription(ctx: SiteContext, request: Request, forum_name: str, on: bool) -> RedirectResponse:
    user = ctx.require_user(request)
    conn = ctx.db(request)
    forum = _forum(conn, forum_name)
    user_id = _user_id(conn, user)
    if on:
        conn.execute("INSERT OR IGNORE INTO subscriptions VALUES (?, ?)", (user_id, forum["id"]))
    else:
        conn.execute("DELETE FROM subscriptions WHERE user_id = ? AND forum_id = ?", (user_id, forum["id"]))
    conn.commit()
    return _back(request, f"/f/{forum['name']}")


def _add_user_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/user/{username}", response_class=HTMLResponse)
    def user_page(request: Request, username: str) -> HTMLResponse:
        conn = ctx.db(request)
        account = conn.execute("SELECT * FROM users WHERE username = ?", (username,)).fetchone()
        if account is None:
            raise HTTPException(404, f"there is no user named {username}")
        posts = _sorted_posts(conn.execute(f"SELECT {POST_COLUMNS} {POST_FROM} WHERE p.user_id = ?",
                                           (account["id"],)).fetchall(), "new")[:PAGE_SIZE]
        comments = conn.execute(
            "SELECT c.id, c.body, c.created, p.id AS post_id, p.title AS post_title, f.name AS forum, "
            "c.upvotes - c.downvotes AS score FROM comments c JOIN posts p ON p.id = c.post_id "
            "JOIN forums f ON f.id = p.forum_id WHERE c.user_id = ? ORDER BY c.created DESC LIMIT ?",
            (account["id"], PAGE_SIZE)).fetchall()
        return ctx.render(request, "user.html", account=account, posts=posts, comments=comments, post_path=post_path)

    @app.get("/user/{username}/edit_biography", response_class=HTMLResponse)
    def bio_form(request: Request, username: str) -> HTMLResponse:
        _own_account(ctx, request, username)
        bio = ctx.db(request).execute("SELECT bio FROM users WHERE username = ?", (username,)).fetchone()["bio"]
        return ctx.render(request, "edit_biography.html", username=username, bio=bio)

    @app.post("/user/{username}/edit_biography")
    def bio_save(request: Request, username: str,
                 biography: Annotated[str, Form(max_length=300)] = "") -> RedirectResponse:
        _own_account(ctx, request, username)
        conn = ctx.db(request)
        conn.execute("UPDATE users SET bio = ? WHERE username = ?", (biography.strip(), username))
        conn.commit()
        return RedirectResponse(f"/user/{username}", status_code=303)


def _own_account(ctx: SiteContext, request: Request, username: str) -> None:
    if ctx.require_user(request) != username:
        raise HTTPException(403, "you can only edit your own biography")


def _add_login_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.get("/login", response_class=HTMLResponse)
    def login_form(request: Request, next: str = "/") -> HTMLResponse:
        return ctx.render(request, "login.html", next=next, error=None)

    @app.post("/login", response_model=None)
    def login(request: Request, username: Annotated[str, Form()], password: Annotated[str, Form()],
              next: Annotated[str, Form()] = "/") -> RedirectResponse | HTMLResponse:
        row = ctx.db(request).execute("SELECT username, password_sha256 FROM users WHERE username = ?",
                                      (username,)).fetchone()
        return ctx.login_attempt(request, row, password, next, error="Invalid username or password.")

    @app.post("/logout")
    def logout(request: Request) -> RedirectResponse:
        return ctx.logout_response("/")


def create_app(ctx: SiteContext) -> FastAPI:
    """The reddit site's routes (see the module docstring)."""
    app = FastAPI(title="reddit sandbox", docs_url=None, redoc_url=None, openapi_url=None)
    _add_listing_routes(app, ctx)
    _add_post_routes(app, ctx)
    _add_submit_routes(app, ctx)
    _add_user_routes(app, ctx)
    _add_login_routes(app, ctx)

    @app.exception_handler(HTTPException)
    async def error_page(request: Request, exc: HTTPException) -> HTMLResponse:
        detail = exc.detail if isinstance(exc.detail, str) else "; ".join(d["msg"] for d in exc.detail)
        return ctx.render(request, "error.html", status_code=exc.status_code, code=exc.status_code, message=detail)

    return app
