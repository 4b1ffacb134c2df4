"""What a sandbox site is given: :class:`SiteContext`, and the wrapper that adds the framework routes.

A site's ``app.py`` defines ``create_app(ctx: SiteContext) -> FastAPI`` with ordinary (sync or async)
routes::

    def create_app(ctx: SiteContext) -> FastAPI:
        app = FastAPI()

        @app.get("/")
        def home(request: Request) -> HTMLResponse:
            rows = ctx.db(request).execute("SELECT ...").fetchall()
            return ctx.render(request, "home.html", rows=rows)

        return app

``SiteContext`` API:

- ``ctx.name`` (site), ``ctx.db_name``, ``ctx.settings``, ``ctx.store``;
- ``ctx.db(request) -> sqlite3.Connection``: the request's episode copy of the site database
  (``row_factory=sqlite3.Row``); the route calls ``.commit()`` after writes; closed after the response;
- ``ctx.episode(request) -> str``: the episode id from the ``webrl_episode`` cookie (``default`` if none);
- ``ctx.render(request, template, status_code=200, **vars) -> HTMLResponse``: Jinja2 with the site's
  ``templates/`` first, then the shared ``webrl/sandbox/templates/`` (``_macros.html``: pagination, stars;
  ``_widgets.html``: dropdown, tabs and modal JS). Templates see ``request``, ``user``
  (``current_user``), ``site`` and ``site_urls`` (every sandbox site's base URL, for cross-site links);
- ``ctx.current_user(request) -> str | None``: the logged-in username (signed cookie, see :mod:`auth`);
- ``ctx.login_response(username, redirect_to="/") -> RedirectResponse`` (303, sets the session cookie);
  ``ctx.logout_response(redirect_to="/")``;
- ``ctx.require_user(request) -> str``: the user, or raises :class:`LoginRequired` which the framework
  turns into a redirect to ``/login?next=<path>``.

:func:`build_site_app` adds to every site: ``DELETE /__webrl/episodes/{id}`` (free an episode's state,
every database), ``GET /__webrl/health``, and an error page for bad episode cookies.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, MutableMapping
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, select_autoescape

from webrl.config import Settings
from webrl.sandbox import auth
from webrl.sandbox.sites import SITES, SiteSpec
from webrl.sandbox.store import DEFAULT_EPISODE, EPISODE_COOKIE, EpisodeStore, InvalidEpisodeError, check_episode_id

SHARED_TEMPLATES = Path(__file__).parent / "templates"
_CONNECTIONS_KEY = "webrl.connections"


def page_query(params: dict[str, Any], page: int) -> str:
    """Query string of ``params`` (empty values dropped) with ``page`` set: the pagination links."""
    items = {k: v for k, v in params.items() if v not in (None, "") and k != "page"}
    items["page"] = page
    return urlencode(items)


class LoginRequired(Exception):
    """Raised by ``ctx.require_user``; answered with a redirect to the site's login page."""


class SiteContext:
    """Everything a site's routes need from the framework (see the module docstring)."""

    def __init__(self, spec: SiteSpec, store: EpisodeStore, settings: Settings) -> None:
        self.name = spec.name
        self.db_name = spec.db
        self.store = store
        self.settings = settings
        self.env = Environment(
            loader=ChoiceLoader([FileSystemLoader(spec.templates_dir), FileSystemLoader(SHARED_TEMPLATES)]),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["page_query"] = page_query
        self.env.globals["site"] = spec.name
        self.env.globals["site_urls"] = settings.site_urls()

    def episode(self, request: Request) -> str:
        return check_episode_id(request.cookies.get(EPISODE_COOKIE) or DEFAULT_EPISODE)

    def db(self, request: Request) -> sqlite3.Connection:
        """The episode's connection for this request (one per request, closed after the response)."""
        conns: dict[str, sqlite3.Connection] = request.scope.setdefault(_CONNECTIONS_KEY, {})
        if self.db_name not in conns:
            conns[self.db_name] = self.store.connect(self.db_name, self.episode(request))
        return conns[self.db_name]

    def current_user(self, request: Request) -> str | None:
        return auth.verify_session(self.name, request.cookies.get(auth.session_cookie_name(self.name)))

    def require_user(self, request: Request) -> str:
        user = self.current_user(request)
        if user is None:
            raise LoginRequired(request.url.path)
        return user

    def render(self, request: Request, template: str, status_code: int = 200, **variables: Any) -> HTMLResponse:
        variables.setdefault("user", self.current_user(request))
        html = self.env.get_template(template).render(request=request, **variables)
        return HTMLResponse(html, status_code=status_code)

    def login_response(self, username: str, redirect_to: str = "/") -> RedirectResponse:
        response = RedirectResponse(redirect_to, status_code=303)
        response.set_cookie(auth.session_cookie_name(self.name), auth.sign_session(self.name, username),
                            httponly=True, samesite="lax", path="/")
        return response

    def login_attempt(self, request: Request, row: Any, password: str, next_url: str, error: str, *,
                      user_column: str = "username", hash_column: str = "password_sha256",
                      status_code: int = 422, home: str = "/", **page: Any) -> RedirectResponse | HTMLResponse:
        """Log the user of ``row`` (its ``user_column`` and ``hash_column``; None when no such user) in when the
        password matches, redirecting to ``next_url`` (same-site paths only, else ``home``); else the login page
        again with ``error``, ``status_code`` and the site's ``page`` variables."""
        if row is None or not auth.check_password(password, row[hash_column]):
            return self.render(request, "login.html", next=next_url, error=error, status_code=status_code, **page)
        return self.login_response(row[user_column], same_site_path(next_url, home))

    def logout_response(self, redirect_to: str = "/") -> RedirectResponse:
        response = RedirectResponse(redirect_to, status_code=303)
        response.delete_cookie(auth.session_cookie_name(self.name), path="/")
        return response


def same_site_path(target: str, home: str = "/") -> str:
    """``target`` when it is a path on this site (``/cart?x=1``), else ``home``, so a redirect to it cannot
    leave the site. Refused: a scheme-relative ``//host/x``; a slash then a backslash (browsers read the
    backslash as a slash); control characters (browsers drop tabs and newlines inside ``/<tab>/host``);
    anything with a scheme."""
    if not target.startswith("/") or target.startswith(("//", "/\\")):
        return home
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in target):
        return home
    parts = urlsplit(target)
    return target if not (parts.scheme or parts.netloc) else home


ASGIApp = Callable[[MutableMapping[str, Any], Callable, Callable], Awaitable[None]]


class _CloseConnections:
    """ASGI middleware: closes the request's episode connections once the response is sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable, send: Callable) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            for conn in scope.pop(_CONNECTIONS_KEY, {}).values():
                conn.close()


def _add_framework_routes(app: FastAPI, ctx: SiteContext) -> None:
    @app.delete("/__webrl/episodes/{episode}", include_in_schema=False)
    def drop_episode(episode: str) -> JSONResponse:
        try:
            existed = ctx.store.drop(episode)
        except InvalidEpisodeError as exc:
            return JSONResponse({"detail": [{"loc": ["path", "episode"], "msg": str(exc)}]}, status_code=422)
        return JSONResponse({"episode": episode, "dropped": existed})

    @app.get("/__webrl/health", include_in_schema=False)
    def health() -> JSONResponse:
        return JSONResponse({"site": ctx.name, "seed": ctx.store.seed})

    @app.exception_handler(LoginRequired)
    async def to_login(request: Request, exc: LoginRequired) -> RedirectResponse:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)

    @app.exception_handler(InvalidEpisodeError)
    async def bad_episode(request: Request, exc: InvalidEpisodeError) -> HTMLResponse:
        # the message quotes the cookie's value, which any page on the host can set: escaped, never markup
        return HTMLResponse(f"<h1>Bad request</h1><p>cookie {EPISODE_COOKIE}: {escape(str(exc))}</p>",
                            status_code=422)


def build_site_app(name: str, store: EpisodeStore, settings: Settings) -> ASGIApp:
    """The site's FastAPI app (``create_app(ctx)``) plus the framework routes, ready for uvicorn."""
    spec = SITES[name]
    ctx = SiteContext(spec, store, settings)
    app: FastAPI = spec.app_module().create_app(ctx)
    _add_framework_routes(app, ctx)
    app.state.webrl_context = ctx
    return _CloseConnections(app)
