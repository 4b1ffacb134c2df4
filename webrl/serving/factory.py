"""The FastAPI app factory every service uses.

It adds ``/healthz`` (process up; answered on the event loop, so it answers while models work in threads),
``/readyz`` (database and broker reachable), ``/metrics`` (Prometheus: requests and latency per route, Celery queue
depth; a service adds its own series, see :mod:`webrl.serving.metrics`), bearer auth when ``WEBRL_SECURITY__API_KEY`` is
set (constant-time compare; a 401 never says why; with no key only loopback is served unless
``WEBRL_SECURITY__ALLOW_NO_AUTH=1``), a request body limit (``WEBRL_LIMITS__MAX_REQUEST_BYTES``, 413; the routes
that carry batches of pages, named by ``batch_routes``, take ``WEBRL_LIMITS__MAX_BATCH_REQUEST_BYTES``), one JSON
error shape ``{"error": {"type", "message", "fields", "request_id"}}`` and request ids in logs. An unhandled error is a
500 in that shape that keeps the connection open for the client's next request.

:func:`model_work` runs a route's blocking model work in a thread, one request at a time per model, within
``WEBRL_LIMITS__MODEL_REQUEST_TIMEOUT_S`` (504 after it); :func:`within` bounds an awaitable the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, Field
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from webrl.config import Settings, get_settings
from webrl.serving.metrics import QueueDepthCollector
from webrl.store.readiness import check_ready
from webrl.wire.contracts import InvalidRequest, NotServing

log = logging.getLogger("webrl.serving.factory")

T = TypeVar("T")

OPEN_PATHS = {"/healthz", "/readyz", "/metrics"}
BODY_LIMIT_SCOPE_KEY = "webrl.body_limit"  # the request's body limit in bytes, for the 413 message
NO_AUTH_FIX = ("set WEBRL_SECURITY__API_KEY (e.g. `openssl rand -hex 32`), or WEBRL_SECURITY__ALLOW_NO_AUTH=1 to serve "
               "without auth")


def is_loopback(host: str) -> bool:
    """Is ``host`` (an address or "localhost") reachable from this machine only?"""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def unauthenticated_bind_problem(host: str, settings: Settings) -> str | None:
    """Why a service may not listen on ``host``, or None: off loopback it needs an API key (or the explicit
    ``security.allow_no_auth``), else every route answers anyone who can reach the machine."""
    if settings.security.api_key or settings.security.allow_no_auth or is_loopback(host):
        return None
    return f"refusing to serve on {host} without an API key: {NO_AUTH_FIX}"


class ErrorField(BaseModel):
    field: str = Field(description="Dotted path of the offending field, e.g. 'steps.0.action'.")
    message: str


class ErrorDetail(BaseModel):
    type: str = Field(description="validation_error | not_found | conflict | unauthorized | payload_too_large | "
                                  "timeout | internal_error | ...")
    message: str
    fields: list[ErrorField] = Field(default_factory=list)
    request_id: str


class ErrorResponse(BaseModel):
    """The one error shape every webrl service answers with."""

    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer token"},
    404: {"model": ErrorResponse, "description": "Not found"},
    413: {"model": ErrorResponse, "description": "Request body over the route's limit"},
    422: {"model": ErrorResponse, "description": "Invalid input; `fields` names each offending field"},
    500: {"model": ErrorResponse, "description": "Internal error"},
}
HTTP_ERROR_TYPES = {404: "not_found", 409: "conflict", 413: "payload_too_large", 422: "validation_error",
                    503: "unavailable", 504: "timeout"}


def error_body(kind: str, message: str, request_id: str, fields: list[dict[str, Any]] | None = None) -> dict:
    return {"error": {"type": kind, "message": message, "fields": fields or [], "request_id": request_id}}


def _fields_of(exc: RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors():
        loc = [str(part) for part in err.get("loc", ()) if part != "body"]
        out.append({"field": ".".join(loc) or "body", "message": err.get("msg", "invalid")})
    return out


def _unauthenticated_remote(request: Request, settings: Settings) -> bool:
    """A request that came in on a network address (the server's own, e.g. a pod IP) while no API key is
    set and no-auth was not allowed: what `uvicorn --host 0.0.0.0` without a key would otherwise serve."""
    server = request.scope.get("server")
    if settings.security.api_key or settings.security.allow_no_auth or not server:
        return False
    try:
        return not ipaddress.ip_address(str(server[0]).strip("[]")).is_loopback
    except ValueError:  # a unix socket or an in-process test transport ("testserver")
        return False


def key_matches(token: str, key: str) -> bool:
    """Is ``token`` the API key? (constant-time)"""
    return bool(token) and hmac.compare_digest(token.encode(), key.encode())


def session_token(key: str) -> str:
    """What a browser's login cookie holds: HMAC-SHA256 of a fixed label under the API key, never the key itself.
    Browsers send a cookie to every port of its host, so a cookie holding the key would hand it to every server
    there (the sandbox sites, Grafana); this token opens the app that set it and is no bearer key anywhere."""
    return hmac.new(key.encode(), b"webrl-login-session", hashlib.sha256).hexdigest()


def authorized(request: Request, key: str, key_cookie: str | None = None) -> bool:
    """Does the request present the API key: its ``Authorization: Bearer`` token, else (an app that lets browsers
    log in) a ``key_cookie`` cookie holding :func:`session_token` of it? (constant-time)"""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token:
        return key_matches(token, key)
    return bool(key_cookie) and key_matches(request.cookies.get(key_cookie or "", ""), session_token(key))


class InternalErrorGuard:
    """ASGI middleware: an unhandled error becomes the 500 error shape here, instead of in Starlette's
    ServerErrorMiddleware, which re-raises it and so makes uvicorn close the keep-alive connection."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            if started:  # half a response is out: only closing the connection can tell the client
                raise
            request_id = _request_id(scope)
            log.exception("%s unhandled error", request_id)
            await JSONResponse(error_body("internal_error", "internal error", request_id), status_code=500,
                               headers={"x-request-id": request_id})(scope, receive, send)


class RequestBodyGuard:
    """ASGI middleware that reads a request's body before the route does and answers, in the error shape:

    - 413 for a body over its route's limit, whether its Content-Length says so (refused before reading) or its
      chunks add up past it;
    - 422 naming the field for JSON text no database or tokenizer takes: a NUL character or a lone surrogate
      (``"\\ud800"`` is valid JSON but not Unicode text; PostgreSQL refuses NUL), in a value, a key, the path or the
      query string. Only a body whose bytes contain such an escape is parsed here.
    """

    def __init__(self, app: ASGIApp, limit_for: Callable[[str], int]) -> None:
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = scope[BODY_LIMIT_SCOPE_KEY] = self.limit_for(scope["path"])
        declared = Headers(scope=scope).get("content-length", "")
        body = None if declared.isdigit() and int(declared) > limit else await _read_body(receive, limit)
        if body is None:
            message = too_large_message(Request(scope))
            await JSONResponse(error_body("payload_too_large", message, _request_id(scope)), status_code=413,
                               headers={"connection": "close"})(scope, receive, send)  # the rest is unread
            return
        problem = _untextual_field(scope, body)
        if problem is not None:
            field, message = problem
            await JSONResponse(error_body("validation_error", f"{field}: {message}", _request_id(scope),
                                          [{"field": field, "message": message}]),
                               status_code=422)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None as soon as it passes ``limit`` bytes."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


UNTEXTUAL = re.compile("[\x00\ud800-\udfff]")  # NUL and surrogates (json.loads joins a valid pair into one char)
UNTEXTUAL_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")  # how they appear in JSON bytes


def _untextual_field(scope: Scope, body: bytes) -> tuple[str, str] | None:
    """(field, why) of the first NUL or lone surrogate in the path, query string or JSON body; else None."""
    if "\x00" in scope["path"]:
        return "path", "contains a NUL character"
    if b"%00" in scope.get("query_string", b""):
        return "query", "contains a NUL character"
    if not UNTEXTUAL_ESCAPE.search(body):
        return None
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the route answers the parse error
    return _first_untextual(document, [])


def _first_untextual(value: Any, at: list[str]) -> tuple[str, str] | None:
    stack: list[tuple[Any, list[str]]] = [(value, at)]
    while stack:
        item, path = stack.pop()
        texts = [(item, path)] if isinstance(item, str) else []
        if isinstance(item, dict):
            texts += [(key, [*path, key]) for key in item]
            stack += [(v, [*path, k]) for k, v in reversed(item.items())]
        elif isinstance(item, list):
            stack += [(v, [*path, str(i)]) for i, v in reversed(list(enumerate(item)))]
        for string, where in texts:
            found = UNTEXTUAL.search(string)
            if found:
                what = "a NUL character" if found.group() == "\x00" else "a lone surrogate (not Unicode text)"
                field = ".".join(_printable(p) for p in where) or "body"
                return field, f"contains {what}"
    return None


def _printable(part: str) -> str:
    return UNTEXTUAL.sub("?", part)


def _request_id(scope: Scope) -> str:
    return scope.get("state", {}).get("request_id", "")


def too_large_message(request: Request) -> str:
    limit = request.scope.get(BODY_LIMIT_SCOPE_KEY)
    return (f"request body over the {limit} bytes {request.method} {request.url.path} takes: send less per request "
            "(the limits are WEBRL_LIMITS__MAX_REQUEST_BYTES and, for batches of pages, "
            "WEBRL_LIMITS__MAX_BATCH_REQUEST_BYTES)")


def create_app(name: str, *, version: str = "0.1.0", settings: Settings | None = None,
               description: str = "", key_cookie: str | None = None,
               open_paths: frozenset[str] = frozenset(), batch_routes: tuple[str, ...] = ()) -> FastAPI:
    """A FastAPI app with webrl's health, metrics, auth, body limit and error handling. Routes are added by the
    caller.

    ``key_cookie``: a cookie that may carry the API key instead of the bearer header (an app people open in a
    browser sets it at its login); ``open_paths``: more paths that need no key (that login page);
    ``batch_routes`` (paths) carry batches of pages and take ``settings.limits.max_batch_request_bytes``, every other
    route ``settings.limits.max_request_bytes``."""
    settings = settings or get_settings()
    unguarded = OPEN_PATHS | open_paths
    app = FastAPI(title=f"webrl {name}", version=version, description=description, responses=ERROR_RESPONSES)
    batch = frozenset(batch_routes)
    app.add_middleware(RequestBodyGuard, limit_for=lambda path: settings.limits.max_batch_request_bytes if path in batch
                       else settings.limits.max_request_bytes)
    app.add_middleware(InternalErrorGuard)
    app.state.settings = settings
    registry = CollectorRegistry()
    # ``webrl_service`` names the service in the series themselves: a scrape config's ``job`` is one value for every
    # pod under Prometheus' stock ``kubernetes-pods`` job (and ``service`` is a label its endpoint jobs set)
    requests_total = Counter("webrl_http_requests_total", "HTTP requests", ["webrl_service", "route", "method",
                                                                             "status"], registry=registry)
    latency = Histogram("webrl_http_request_seconds", "Request latency", ["webrl_service", "route"],
                        registry=registry)
    registry.register(QueueDepthCollector(settings.jobs.broker_url))
    app.state.metrics_registry = registry  # a service adds its own series (webrl.serving.metrics.register_value)

    @app.middleware("http")
    async def _request_context(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex[:16]
        request.state.request_id = request_id
        if request.url.path not in unguarded and _unauthenticated_remote(request, settings):
            return JSONResponse(error_body("unauthorized", f"no API key on a non-loopback address: {NO_AUTH_FIX}",
                                           request_id), status_code=401, headers={"x-request-id": request_id})
        guarded = settings.security.api_key and request.url.path not in unguarded
        if guarded and not authorized(request, settings.security.api_key, key_cookie):
            return JSONResponse(error_body("unauthorized", "unauthorized", request_id), status_code=401,
                                headers={"WWW-Authenticate": "Bearer", "x-request-id": request_id})
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        latency.labels(name, path).observe(time.perf_counter() - start)
        requests_total.labels(name, path, request.method, str(response.status_code)).inc()
        response.headers["x-request-id"] = request_id
        log.info("%s %s %s %d", request_id, request.method, request.url.path, response.status_code)
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = _fields_of(exc)
        message = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        rid = getattr(request.state, "request_id", "")
        return JSONResponse(error_body("validation_error", message, rid, fields), status_code=422)

    @app.exception_handler(InvalidRequest)
    async def _invalid(request: Request, exc: InvalidRequest) -> JSONResponse:
        rid = getattr(request.state, "request_id", "")
        fields = [{"field": exc.field, "message": str(exc)}]
        return JSONResponse(error_body("validation_error", str(exc), rid, fields), status_code=422)

    @app.exception_handler(NotServing)
    async def _not_serving(request: Request, exc: NotServing) -> JSONResponse:
        rid = getattr(request.state, "request_id", "")
        return JSONResponse(error_body("http_error", str(exc), rid), status_code=503)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        rid = getattr(request.state, "request_id", "")
        kind = HTTP_ERROR_TYPES.get(exc.status_code, "http_error")
        message = too_large_message(request) if exc.status_code == 413 else str(exc.detail)
        return JSONResponse(error_body(kind, message, rid), status_code=exc.status_code)

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": name}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        status = check_ready(settings)
        ok = all(v == "ok" for v in status.values())
        return JSONResponse({"status": "ok" if ok else "unavailable", "checks": status},
                            status_code=200 if ok else 503)

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    def metrics() -> Response:  # a thread: a scrape reads the broker, which must never hold up the event loop
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def not_found(what: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"{what} not found")


def invalid(field: str, message: str) -> RequestValidationError:
    """A 422 naming ``field`` of the request body (the error shape lists it under ``fields``)."""
    return RequestValidationError([{"loc": ("body", *field.split(".")), "msg": message, "type": "value_error"}])


def _timed_out(settings: Settings, what: str) -> HTTPException:
    limit = settings.limits.model_request_timeout_s
    return HTTPException(status_code=504, detail=f"{what} took longer than {limit:g} s "
                                                 "(WEBRL_LIMITS__MODEL_REQUEST_TIMEOUT_S)")


async def within(settings: Settings, work: Awaitable[T], what: str) -> T:
    """``await work``, or a 504 naming ``what`` after ``settings.limits.model_request_timeout_s``."""
    try:
        return await asyncio.wait_for(work, settings.limits.model_request_timeout_s)
    except TimeoutError:
        raise _timed_out(settings, what) from None


async def model_work(settings: Settings, lock: threading.Lock, work: Callable[[], T], what: str) -> T:
    """Blocking model work off the event loop: ``work()`` in a thread, under ``lock`` (one forward pass at a
    time per model), all within ``settings.limits.model_request_timeout_s`` (waiting for the lock included), else a
    504 naming ``what``. The event loop stays free for health checks and other routes meanwhile. A request that
    answered 504 while it waited for the model never runs its work (a thread cannot be stopped, but it can be told
    not to start): the requests behind it do not wait on work no one will read."""
    timeout = settings.limits.model_request_timeout_s
    deadline = time.monotonic() + timeout
    started, abandoned = threading.Event(), threading.Event()
    starting = threading.Lock()  # the thread starts the work, or the timed-out request abandons it: never both

    def locked() -> T:  # its thread may start late (the executor busy): it waits for the model until the deadline
        if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TimeoutError
        try:
            with starting:
                if abandoned.is_set():  # its request answered 504 while this waited for the model: no work for no one
                    raise TimeoutError
                started.set()
            return work()
        finally:
            lock.release()

    try:
        return await asyncio.wait_for(asyncio.to_thread(locked), timeout)
    except TimeoutError:
        with starting:
            abandoned.set()
            busy = "" if started.is_set() else " (waiting for the model, busy with other requests)"
        raise _timed_out(settings, what + busy) from None
