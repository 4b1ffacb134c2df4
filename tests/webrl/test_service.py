"""The service factory over real HTTP (uvicorn): health, readiness, metrics, auth, error shape."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, HTTPException
from local_ports import free_port
from pydantic import BaseModel, Field

from webrl.config import Settings
from webrl.serving.factory import create_app, model_work


class Echo(BaseModel):
    text: str = Field(min_length=1)
    times: int = Field(1, ge=1, le=5)


MODEL_LOCK = threading.Lock()  # what a model service holds while a forward pass runs


def _app(settings: Settings) -> FastAPI:
    app = create_app("echo", settings=settings)

    @app.post("/v1/echo")
    def echo(body: Echo) -> dict[str, str]:
        return {"text": body.text * body.times}

    @app.get("/v1/boom")
    def boom() -> dict[str, str]:
        raise RuntimeError("a bug")

    @app.post("/v1/slow")
    async def slow(seconds: float) -> dict[str, float]:
        return {"slept": await model_work(settings, MODEL_LOCK, lambda: time.sleep(seconds) or seconds, "sleeping")}

    return app


@pytest.fixture
def served(settings: Settings) -> Iterator[tuple[str, Settings]]:
    """Serve the app with uvicorn on a free port; yields its base URL."""
    secured = settings.replace(security={"api_key": "s3cret-key"})
    port = free_port()
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

    broken = Settings(home=tmp_path, database={"url": "postgresql+psycopg://nobody@127.0.0.1:1/none"}, _env_file=None)
    resp = TestClient(create_app("x", settings=broken)).get("/readyz")
    assert resp.status_code == 503
    assert resp.json()["checks"]["database"].startswith("error")


@pytest.mark.parametrize("server, allowed", [("127.0.0.1", True), ("[::1]", True), ("10.1.2.3", False)])
async def test_without_a_key_only_loopback_is_served(tmp_path, server: str, allowed: bool) -> None:
    """No API key: a request that came in on a network address gets a 401 saying how to fix it (health
    checks stay open); loopback is served; WEBRL_SECURITY__ALLOW_NO_AUTH=1 serves both; a key serves both with auth."""
    base = Settings(home=tmp_path, database={"url": "sqlite://"}, _env_file=None)
    for settings, served in ((base, allowed), (base.replace(security={"allow_no_auth": True}), True)):
        transport = httpx.ASGITransport(app=_app(settings))
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{server}:8101") as client:
            reply = await client.post("/v1/echo", json={"text": "x"})
            assert (reply.status_code == 200) is served, reply.text
            if not served:
                assert reply.status_code == 401 and "WEBRL_SECURITY__API_KEY" in reply.json()["error"]["message"]
            assert (await client.get("/healthz")).status_code == 200


def test_serve_refuses_an_open_network_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from webrl.cli import app
    from webrl.config import get_settings
    from webrl.serving.factory import unauthenticated_bind_problem

    monkeypatch.delenv("WEBRL_SECURITY__API_KEY", raising=False)
    monkeypatch.delenv("WEBRL_SECURITY__ALLOW_NO_AUTH", raising=False)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["serve", "actor", "--host", "0.0.0.0"])
        assert result.exit_code == 2 and "WEBRL_SECURITY__API_KEY" in result.output
        unknown = CliRunner().invoke(app, ["serve", "nothing"])
        assert unknown.exit_code == 2 and "unknown service 'nothing'" in unknown.output
    finally:
        get_settings.cache_clear()
    open_settings = Settings(_env_file=None)
    for host in ("127.0.0.1", "::1", "[::1]", "localhost"):
        assert unauthenticated_bind_problem(host, open_settings) is None, host
    assert "0.0.0.0" in (unauthenticated_bind_problem("0.0.0.0", open_settings) or "")
    assert unauthenticated_bind_problem("0.0.0.0", Settings(security={"api_key": "k"}, _env_file=None)) is None
    assert unauthenticated_bind_problem("0.0.0.0", Settings(security={"allow_no_auth": True}, _env_file=None)) is None


def _exchange(sock: socket.socket, path: str) -> bytes:
    """One keep-alive GET on ``sock``; the raw response (b"" when the server closed the connection)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret-key\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_500_is_the_error_shape_and_keeps_the_connection(served: tuple[str, Settings]) -> None:
    url, _ = served
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        failed = _exchange(sock, "/v1/boom")
        assert failed.startswith(b"HTTP/1.1 500") and b'"type":"internal_error"' in failed
        assert b"a bug" not in failed  # the error is logged, not told
        for _ in range(3):  # the same connection serves the next requests
            assert _exchange(sock, "/healthz").startswith(b"HTTP/1.1 200")


def test_model_work_runs_off_the_loop_one_at_a_time_within_the_timeout(settings: Settings) -> None:
    from fastapi.testclient import TestClient

    hurried = settings.replace(limits={"model_request_timeout_s": 0.5})
    with TestClient(_app(hurried)) as client:
        assert client.post("/v1/slow", params={"seconds": 0.01}).json() == {"slept": 0.01}
        late = client.post("/v1/slow", params={"seconds": 5})
        assert late.status_code == 504 and late.json()["error"]["type"] == "timeout"
        message = late.json()["error"]["message"]
        assert "sleeping took longer than 0.5 s (WEBRL_LIMITS__MODEL_REQUEST_TIMEOUT_S)" in message
        busy = client.post("/v1/slow", params={"seconds": 0.01})  # the 5 s sleep still holds the model
        assert busy.status_code == 504 and "sleeping (waiting for the model, busy with other requests) took" \
            in busy.json()["error"]["message"]


async def test_a_request_that_timed_out_waiting_for_the_model_never_runs_its_work(settings: Settings) -> None:
    """Its thread started late (the executor's one thread was busy for half the limit) and still waited for the model
    when the request answered 504: the model freed just after, it does not run work no one will read."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    model, busy, ran = threading.Lock(), threading.Event(), []
    model.acquire()  # another request's forward pass
    occupied = loop.run_in_executor(None, busy.wait, 10)
    late = asyncio.create_task(model_work(settings.replace(limits={"model_request_timeout_s": 1.0}), model,
                                          lambda: ran.append("late"), "late"))
    await asyncio.sleep(0.5)
    busy.set()  # the late request's thread starts and waits for the model
    await occupied
    with pytest.raises(HTTPException) as answered:
        await late
    assert answered.value.status_code == 504 and "waiting for the model" in answered.value.detail
    model.release()  # the forward pass ends right after the 504
    await loop.run_in_executor(None, lambda: None)  # one thread, first in first out: the late request's has ended
    assert ran == []


@pytest.mark.parametrize(("raw", "field", "what"), [
    (b'{"text": "a\\u0000b"}', "text", "NUL"),
    (b'{"text": "\\ud800"}', "text", "lone surrogate"),
    (b'{"text": "x", "\\udfff": 1}', "?", "lone surrogate"),
    (b'{"text": "ok", "times": 1, "deep": [{"a": ["\\udc00x"]}]}', "deep.0.a.0", "lone surrogate"),
])
def test_text_no_database_takes_is_a_422_naming_the_field(served: tuple[str, Settings], raw: bytes, field: str,
                                                          what: str) -> None:
    url, _ = served
    headers = {"Authorization": "Bearer s3cret-key", "content-type": "application/json"}
    reply = httpx.post(f"{url}/v1/echo", content=raw, headers=headers)
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["fields"][0]["field"] == field and what in error["message"]
    paired = httpx.post(f"{url}/v1/echo", content=b'{"text": "\\ud83d\\ude00"}', headers=headers)
    assert paired.status_code == 200 and paired.json() == {"text": "\U0001F600"}  # an escaped pair is text
    assert httpx.get(f"{url}/v1/echo%00", headers=headers).status_code == 422
