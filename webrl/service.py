"""The FastAPI app factory every service uses.

It adds ``/healthz`` (process up), ``/readyz`` (database and broker reachable), ``/metrics``
(Prometheus: requests and latency per route, Celery queue depth; a service adds its own series, see
:mod:`webrl.service_metrics`), bearer auth when ``WEBRL_API_KEY`` is set (constant-time compare; a 401 never
says why; with no key only loopback is served unless ``WEBRL_ALLOW_NO_AUTH=1``),
one JSON error shape ``{"error": {"type", "message", "fields", "request_id"}}`` and request ids in logs.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from webrl.config import Settings, get_settings
from webrl.contracts import InvalidRequest, NotServing
from webrl.readiness import check_ready
from webrl.service_metrics import QueueDepthCollector

log = logging.getLogger("webrl.service")

OPEN_PATHS = {"/healthz", "/readyz", "/metrics"}
NO_AUTH_FIX = "set WEBRL_API_KEY (e.g. `openssl rand -hex 32`), or WEBRL_ALLOW_NO_AUTH=1 to serve without auth"


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
    ``allow_no_auth``), else every route answers anyone who can reach the machine."""
    if settings.api_key or settings.allow_no_auth or is_loopback(host):
        return None
    return f"refusing to serve on {host} without an API key: {NO_AUTH_FIX}"


class ErrorField(BaseModel):
    field: str = Field(description="Dotted path of the offending field, e.g. 'steps.0.action'.")
    message: str


class ErrorDetail(BaseModel):
    type: str = Field(description="validation_error | not_found | conflict | unauthorized | internal_error | ...")
    message: str
    fields: list[ErrorField] = Field(default_factory=list)
    request_id: str


class ErrorResponse(BaseModel):
    """The one error shape every webrl service answers with."""

    error: ErrorDetail


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "Missing or wrong bearer token"},
    404: {"model": ErrorResponse, "description": "Not found"},
    422: {"model": ErrorResponse, "description": "Invalid input; `fields` names each offending field"},
    500: {"model": ErrorResponse, "description": "Internal error"},
}


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
    if settings.api_key or settings.allow_no_auth or not server:
        return False
    try:
        return not ipaddress.ip_address(str(server[0]).strip("[]")).is_loopback
    except ValueError:  # a unix socket or an in-process test transport ("testserver")
        return False


def create_app(name: str, *, version: str = "0.1.0", settings: Settings | None = None,
               description: str = "") -> FastAPI:
    """A FastAPI app with webrl's health, metrics, auth and error handling. Routes are added by the caller."""
    settings = settings or get_settings()
    app = FastAPI(title=f"webrl {name}", version=version, description=description, responses=ERROR_RESPONSES)
    app.state.settings = settings
    registry = CollectorRegistry()
    requests_total = Counter("webrl_http_requests_total", "HTTP requests", ["route", "method", "status"],
                             registry=registry)
    latency = Histogram("webrl_http_request_seconds", "Request latency", ["route"], registry=registry)
    registry.register(QueueDepthCollector(settings.broker_url))
    app.state.metrics_registry = registry  # a service adds its own series (webrl.service_metrics.register_value)

    @app.middleware("http")
    async def _request_context(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex[:16]
        request.state.request_id = request_id
        if request.url.path not in OPEN_PATHS and _unauthenticated_remote(request, settings):
            return JSONResponse(error_body("unauthorized", f"no API key on a non-loopback address: {NO_AUTH_FIX}",
                                           request_id), status_code=401, headers={"x-request-id": request_id})
        if settings.api_key and request.url.path not in OPEN_PATHS:
            header = request.headers.get("authorization", "")
            scheme, _, token = header.partition(" ")
            good = scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), settings.api_key.encode())
            if not good:
                return JSONResponse(error_body("unauthorized", "unauthorized", request_id), status_code=401,
                                    headers={"WWW-Authenticate": "Bearer", "x-request-id": request_id})
        start = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        latency.labels(path).observe(time.perf_counter() - start)
        requests_total.labels(path, request.method, str(response.status_code)).inc()
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
        kind = {404: "not_found", 409: "conflict", 422: "validation_error"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(kind, str(exc.detail), rid), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
        rid = getattr(request.state, "request_id", "")
        log.exception("%s unhandled error", rid)
        return JSONResponse(error_body("internal_error", "internal error", rid), status_code=500)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "service": name}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        status = check_ready(settings)
        ok = all(v == "ok" for v in status.values())
        return JSONResponse({"status": "ok" if ok else "unavailable", "checks": status},
                            status_code=200 if ok else 503)

    @app.get("/metrics", tags=["health"], response_class=PlainTextResponse)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def not_found(what: str) -> HTTPException:
    return HTTPException(status_code=404, detail=f"{what} not found")


def invalid(field: str, message: str) -> RequestValidationError:
    """A 422 naming ``field`` of the request body (the error shape lists it under ``fields``)."""
    return RequestValidationError([{"loc": ("body", *field.split(".")), "msg": message, "type": "value_error"}])
