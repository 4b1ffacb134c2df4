"""The viewer's routes: runs, a run's phases, a phase's generated tasks, trajectories (filtered), one trajectory
step by step, a task's attempts across phases, screenshots and plots. Each route reads through
:mod:`webrl.viewer.queries` in a read-only session and renders a template; nothing here writes.

Auth is every service's (:func:`webrl.serving.factory.create_app`): with ``WEBRL_SECURITY__API_KEY`` set every page
wants the key, as a bearer header or, for a browser, the cookie ``/login`` sets; without one only loopback is served.
Every response carries a Content-Security-Policy that allows no script at all and nothing from elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Annotated, TypeVar
from urllib.parse import quote

from fastapi import Depends, FastAPI, Form, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm import Session

from webrl.config import Settings, get_settings
from webrl.db.session import read_only_scope
from webrl.runs.report import (
    FLIPS_NOTE,
    ORM_COLUMN_NOTE,
    calibration_points_in,
    comparison_lines,
    flips_table,
    phase_table,
)
from webrl.serving.factory import create_app, key_matches, not_found, session_token
from webrl.store import screenshots
from webrl.viewer import plots, queries
from webrl.viewer.templating import templates
from webrl.viewer.tokens import decoder_for
from webrl.wire.contracts import DB_MAX_INT

KEY_COOKIE = "webrl_key"
STATIC = Path(__file__).with_name("static")
#: No script, no frame, no plugin, nothing from another origin; styles and images from the viewer only. A page's
#: markup shown in an observation cannot run even if an escaping bug ever let it through.
CSP = ("default-src 'none'; img-src 'self'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}
REFRESH_S = 10  # a run in progress reloads its page this often (a meta refresh: no script)

pages = templates()
T = TypeVar("T")
#: A row id or a phase index in a path: INTEGER columns (signed 32-bit on Postgres); a larger number is a 422
#: naming it, not an overflow in the database driver (a 500).
RowId = Annotated[int, PathParam(ge=1, le=DB_MAX_INT)]
PhaseIndex = Annotated[int, PathParam(ge=0, le=DB_MAX_INT)]


def _session(request: Request) -> Iterator[Session]:
    with read_only_scope(request.app.state.settings) as session:
        yield session


SessionDep = Annotated[Session, Depends(_session)]


def _secure_headers(app: FastAPI, settings: Settings) -> None:
    """Security headers on every response; a browser's page request without the key goes to ``/login``."""

    @app.middleware("http")
    async def _headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        wants_page = request.method == "GET" and "text/html" in request.headers.get("accept", "")
        if response.status_code == 401 and settings.security.api_key and wants_page:
            response = RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        response.headers.update(SECURITY_HEADERS)
        return response


def build_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = create_app("viewer", settings=settings, key_cookie=KEY_COOKIE,
                     open_paths=frozenset({"/login", "/static/viewer.css", "/favicon.ico"}),
                     description="Read-only viewer of runs, phases, generated tasks and trajectories.")
    _secure_headers(app, settings)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    _routes(app)
    return app


def _routes(app: FastAPI) -> None:
    @app.get("/", response_class=HTMLResponse, tags=["viewer"])
    def runs(request: Request, session: SessionDep) -> Response:
        return pages.TemplateResponse(request, "runs.html", {"runs": queries.run_summaries(session)})

    @app.get("/runs/{name}", response_class=HTMLResponse, tags=["viewer"])
    def run(request: Request, name: str, session: SessionDep) -> Response:
        view = _found(queries.run_view(session, name), f"run {name!r}")
        header, body = phase_table(view.rows)
        flips_header, flips_body = flips_table(view.rows)
        return pages.TemplateResponse(request, "run.html", {
            "run": view, "header": header, "body": body, "orm_note": ORM_COLUMN_NOTE,
            "flips_header": flips_header, "flips_body": flips_body, "flips_note": FLIPS_NOTE,
            "compared": comparison_lines(view.rows),
            "plotted": any("evaluate.success" in r for r in view.rows),
            "calibrated": bool(calibration_points_in(session)), "refresh": REFRESH_S if view.current else None})

    @app.get("/runs/{name}/success.png", tags=["viewer"])
    def success_plot(name: str, session: SessionDep) -> Response:
        view = _found(queries.run_view(session, name), f"run {name!r}")
        return Response(plots.success_png(view.rows), media_type="image/png")

    @app.get("/calibration.png", tags=["viewer"])
    def calibration_plot(session: SessionDep) -> Response:
        png = _found(plots.calibration_png(calibration_points_in(session)), "ORM judgement of a scored trajectory")
        return Response(png, media_type="image/png")

    @app.get("/runs/{name}/phases/{index}", response_class=HTMLResponse, tags=["viewer"])
    def phase(request: Request, name: str, index: PhaseIndex, session: SessionDep) -> Response:
        tasks = _found(queries.phase_tasks(session, name, index), f"phase {index} of run {name!r}")
        return pages.TemplateResponse(request, "phase.html", {"phase": tasks})

    @app.get("/trajectories", response_class=HTMLResponse, tags=["viewer"])
    def trajectories(request: Request, filters: Annotated[queries.TrajectoryFilters, Query()],
                     session: SessionDep) -> Response:
        return pages.TemplateResponse(request, "trajectories.html", {
            "page": queries.trajectory_page(session, filters), "choices": queries.filter_choices(session)})

    @app.get("/trajectories/{trajectory_id}", response_class=HTMLResponse, tags=["viewer"])
    def trajectory(request: Request, trajectory_id: RowId, session: SessionDep) -> Response:
        view = queries.trajectory_view(session, trajectory_id, decoder_for(session, app.state.settings))
        return pages.TemplateResponse(request, "trajectory.html", {"t": _found(view, f"trajectory {trajectory_id}")})

    @app.get("/tasks/{task_id}", response_class=HTMLResponse, tags=["viewer"])
    def task(request: Request, task_id: RowId, session: SessionDep) -> Response:
        attempts = queries.task_attempts(session, task_id, decoder_for(session, app.state.settings))
        return pages.TemplateResponse(request, "task.html", {"task": _found(attempts, f"task {task_id}")})

    @app.get("/screenshots/{step_id}", tags=["viewer"])
    def screenshot(step_id: RowId, session: SessionDep) -> Response:
        rel = queries.screenshot_path(session, step_id)
        path = _found(screenshots.resolve(app.state.settings, rel) if rel else None, f"screenshot of step {step_id}")
        return Response(path.read_bytes(), media_type=screenshots.MEDIA_TYPES[path.suffix],
                        headers={"Cache-Control": "private, max-age=86400"})

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)  # no icon; answered so that browsers log no failed request

    @app.get("/login", response_class=HTMLResponse, tags=["viewer"])
    def login_form(request: Request, next: str = "/") -> Response:
        return pages.TemplateResponse(request, "login.html", {"next": _local(next), "failed": False})

    @app.post("/login", tags=["viewer"])
    def login(request: Request, key: Annotated[str, Form(max_length=512)],
              next: Annotated[str, Form(max_length=2000)] = "/") -> Response:
        api_key = app.state.settings.security.api_key
        if not api_key or not key_matches(key, api_key):
            return pages.TemplateResponse(request, "login.html", {"next": _local(next), "failed": True},
                                          status_code=401)
        response = RedirectResponse(_local(next), status_code=303)
        response.set_cookie(KEY_COOKIE, session_token(api_key), httponly=True, samesite="strict",
                            secure=request.url.scheme == "https")
        return response


def _found(value: T | None, what: str) -> T:
    """``value``, or a 404 naming ``what`` when there is none."""
    if value is None:
        raise not_found(what)
    return value


def _local(target: str) -> str:
    """``target`` when it is a path on this site, else "/" (a login never sends the browser elsewhere)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"
