"""The service factory over real HTTP (uvicorn): health, readiness, metrics, auth, error shape."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, Field

from webrl.config import Settings
from webrl.service import create_app


class Echo(BaseModel):
    text: str = Field(min_length=1)
    times: int = Field(1, ge=1, le=5)


def _app(settings: Settings) -> FastAPI:
    app = create_app("echo", settings=settings)

    @app.post("/v1/echo")
    def echo(body: Echo) -> dict[str, str]:
        return {"text": body.text * body.times}

    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[str, Settings]]:
    """Serve the app with uvicorn on a free port; yields its base URL."""
    secured = settings.model_copy(update={"api_key": "s3cret-key"})
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(_app(secured), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", secured
    server.should_exit = True
    thread.join(timeout=10)


def test_health_is_open_and_routes_want_the_key(served: tuple[str, Settings]) -> None:
    url, _ = served
    with httpx.Client(base_url=url) as client:
        assert client.get("/healthz").json() == {"status": "ok", "service": "echo"}
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"
        assert "webrl_http_requests_total" in client.get("/metrics").text

        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-key"}):
            denied = client.post("/v1/echo", json={"text": "a"}, headers=headers)
            assert denied.status_code == 401
            assert denied.json()["error"]["message"] == "unauthorized"  # never says why
        ok = client.post("/v1/echo", json={"text": "ab", "times": 2}, headers={"Authorization": "Bearer s3cret-key"})
        assert ok.status_code == 200 and ok.json() == {"text": "abab"}
        assert ok.headers["x-request-id"]


def test_bad_input_is_a_422_naming_the_field(served: tuple[str, Settings]) -> None:
    url, _ = served
    auth = {"Authorization": "Bearer s3cret-key", "x-request-id": "req-42"}
    resp = httpx.post(f"{url}/v1/echo", json={"text": "a", "times": 9}, headers=auth)
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["type"] == "validation_error"
    assert error["fields"][0]["field"] == "times"
    assert "times" in error["message"]
    assert error["request_id"] == "req-42"


def test_readyz_reports_an_unreachable_database(tmp_path) -> None:
    from fastapi.testclient import TestClient

    broken = Settings(home=tmp_path, database_url="postgresql+psycopg://nobody@127.0.0.1:1/none", _env_file=None)
    resp = TestClient(create_app("x", settings=broken)).get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["checks"]["database"].startswith("error")


@pytest.mark.parametrize("server, allowed", [("127.0.0.1", True), ("[::1]", True), ("10.1.2.3", False)])
async def test_without_a_key_only_loopback_is_served(tmp_path, server: str, allowed: bool) -> None:
    """No API key: a request that came in on a network address gets a 401 saying how to fix it (health
    checks stay open); loopback is served; WEBRL_ALLOW_NO_AUTH=1 serves both; a key serves both with auth."""
    base = Settings(home=tmp_path, database_url="sqlite://", _env_file=None)
    for settings, served in ((base, allowed), (base.model_copy(update={"allow_no_auth": True}), True)):
        transport = httpx.ASGITransport(app=_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{server}:8101") as client:
            reply = await client.post("/v1/echo", json={"text": "x"})
            assert (reply.status_code == 200) is served, reply.text
            if not served:
                assert reply.status_code == 401 and "WEBRL_API_KEY" in reply.json()["error"]["message"]
            assert (await client.get("/healthz")).status_code == 200


def test_serve_refuses_an_open_network_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from webrl.cli import app
    from webrl.config import get_settings
    from webrl.service import unauthenticated_bind_problem

    monkeypatch.delenv("WEBRL_API_KEY", raising=False)
    monkeypatch.delenv("WEBRL_ALLOW_NO_AUTH", raising=False)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["serve", "actor", "--host", "0.0.0.0"])
        assert result.exit_code == 2 and "WEBRL_API_KEY" in result.output
        unknown = CliRunner().invoke(app, ["serve", "nothing"])
        assert unknown.exit_code == 2 and "unknown service 'nothing'" in unknown.output
    finally:
        get_settings.cache_clear()
    open_settings = Settings(_env_file=None)
    for host in ("127.0.0.1", "::1", "[::1]", "localhost"):
        assert unauthenticated_bind_problem(host, open_settings) is None, host
    assert "0.0.0.0" in (unauthenticated_bind_problem("0.0.0.0", open_settings) or "")
    assert unauthenticated_bind_problem("0.0.0.0", Settings(api_key="k", _env_file=None)) is None
    assert unauthenticated_bind_problem("0.0.0.0", Settings(allow_no_auth=True, _env_file=None)) is None
