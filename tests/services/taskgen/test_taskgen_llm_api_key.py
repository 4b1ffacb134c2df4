"""The llm generator and its feasibility judge send the configured ``llm_judge.api_key`` to the configured
endpoint, and only there: a real OpenAI-compatible server on loopback records each request's Authorization
header, and the taskgen app's ``POST /v1/tasks/generate`` drives it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fastapi.testclient import TestClient

from webrl.config import Settings, get_settings

KEY = "judge-key-123"
TASK = "Find the cheapest blue mug in the store"
REFUSED = {"no-such-model": 404, "failing": 500}  # model name: the status the server answers it with


class _Recorder(BaseHTTPRequestHandler):
    """An OpenAI chat-completions server: a backticked task to the evolution prompt, YES to the judge."""

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, self.headers.get("Authorization")))  # type: ignore[attr-defined]
        if body["model"] in REFUSED:  # a model the server does not serve, or a server failing
            status = REFUSED[body["model"]]
            error = json.dumps({"error": {"message": f"{status}", "type": "error", "code": status}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error)
            return
        judge = body.get("max_tokens") == 4  # the feasibility judge asks for a few tokens
        content = "YES" if judge else f"`{TASK}`"
        reply = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


def _serve() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def judge() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """The configured judge: its base URL and the (path, Authorization) of each request it got."""
    yield from _serve()


@pytest.fixture
def other() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    """Another allowed endpoint (WEBRL_SECURITY__ALLOWED_ENDPOINTS): it must never see the judge's key."""
    yield from _serve()


@pytest.fixture
def client(settings: Settings, judge, other, parent_task: Callable[..., None],
           monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("WEBRL_LLM_JUDGE__ENDPOINT", judge[0] + "/v1")
    monkeypatch.setenv("WEBRL_LLM_JUDGE__MODEL", "judge")
    monkeypatch.setenv("WEBRL_LLM_JUDGE__API_KEY", KEY)
    monkeypatch.setenv("WEBRL_SECURITY__ALLOWED_ENDPOINTS", other[0])
    get_settings.cache_clear()
    parent_task(get_settings())
    from services.taskgen.app import app

    with TestClient(app) as c:
        yield c
    get_settings.cache_clear()


def test_the_configured_judge_gets_its_key(client: TestClient, judge) -> None:
    reply = client.post("/v1/tasks/generate", json={"phase": 1, "parent_keys": ["p1"], "n": 1, "generator": "llm"})
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["task_keys"]) == 1  # the judge answered YES: the generated task was stored
    seen = judge[1]
    assert [path for path, _ in seen] == ["/v1/chat/completions"] * 2  # the evolution prompt, then the judge
    assert {auth for _, auth in seen} == {f"Bearer {KEY}"}


def test_another_endpoint_never_gets_the_key(client: TestClient, other) -> None:
    reply = client.post("/v1/tasks/generate", json={"phase": 1, "parent_keys": ["p1"], "n": 1, "generator": "llm",
                                                    "endpoint": other[0], "model": "other"})
    assert reply.status_code == 200, reply.text
    assert other[1] and {auth for _, auth in other[1]} == {"Bearer EMPTY"}


@pytest.mark.parametrize("spelling", ["http://user:pw@{host}/v1", "http://127.0.0.1:1\\@{host}/v1"])
def test_an_endpoint_with_user_info_or_a_backslash_is_a_422_naming_it(client: TestClient, judge, spelling) -> None:
    """The judge's origin spelt with user info or a backslash (read as another server by a WHATWG reader) is
    refused before any request is sent."""
    endpoint = spelling.format(host=judge[0].removeprefix("http://"))
    reply = client.post("/v1/tasks/generate", json={"phase": 1, "parent_keys": ["p1"], "n": 1, "generator": "llm",
                                                    "endpoint": endpoint, "model": "judge"})
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["fields"][0]["field"] == "endpoint"
    assert judge[1] == []


def test_the_llm_servers_refusals_are_a_422_naming_the_model_or_a_503(client: TestClient, other) -> None:
    """A model the server does not serve is the request's fault (422 naming ``model``); a server that fails is not
    (503, after the client's retries); neither stores a task (both were 500s)."""
    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(get_settings()) as s:
        stored = s.query(m.Task).count()
    for model, status in (("no-such-model", 422), ("failing", 503)):
        reply = client.post("/v1/tasks/generate", json={"phase": 1, "parent_keys": ["p1"], "n": 1,
                                                        "generator": "llm", "endpoint": other[0], "model": model})
        assert reply.status_code == status, (model, reply.text)
        error = reply.json()["error"]
        if status == 422:
            assert error["fields"][0]["field"] == "model" and "serves no model 'no-such-model'" in error["message"]
        else:
            assert "answered 500" in error["message"], error
    with session_scope(get_settings()) as s:
        assert s.query(m.Task).count() == stored
