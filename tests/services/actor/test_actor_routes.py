"""The actor's own routes against a real tiny model: /v1/act, /v1/logprobs, /v1/model, 422s."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from services.actor.app import create_actor_app
from services.actor.engine import ActorEngine
from webrl.config import Settings
from webrl.models.backends.local import LocalBackend

HTML = '<html> <a id="3"> Electronics </a> <a id="4"> Books </a> </html>'


@pytest.fixture
def client(actor_model_dir: Path, settings: Settings):
    backend = LocalBackend.from_path(actor_model_dir, settings)
    app = create_actor_app(settings, engine=ActorEngine(settings, backend, backend.tokenizer))
    from fastapi.testclient import TestClient

    with TestClient(app) as test_client:
        yield test_client


def _item(intent: str = "Show me Electronics", history: list[str] | None = None) -> dict:
    return {"intent": intent, "observation": {"html": HTML, "url": "http://127.0.0.1:7770/"},
            "history": history or []}


def test_act_returns_text_ids_logprobs_and_version(client) -> None:
    reply = client.post("/v1/act", json={"batch": [_item(), _item(history=['do(action="Scroll Down")'])],
                                         "max_new_tokens": 12})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["version"] == "actor-v1" and len(body["results"]) == 2
    for result in body["results"]:
        assert len(result["token_ids"]) == len(result["logprobs"]) > 0
        assert result["version"] == "actor-v1" and result["prompt_tokens"] > 0
        assert (result["action"] is None) != (result["parse_error"] is None)
    again = client.post("/v1/act", json={"batch": [_item()], "max_new_tokens": 12}).json()
    assert again["results"][0]["token_ids"] == body["results"][0]["token_ids"]  # greedy by default


def test_log_probs_requests_take_the_model_one_at_a_time(client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ran its forward pass at once beside the others (and beside generation): on a GPU, memory for all."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    engine = client.app.state.engine
    real, running, most = engine.logprobs, [], []
    lock = threading.Lock()

    def counted(pairs):
        with lock:
            running.append(1)
            most.append(len(running))
        try:
            time.sleep(0.2)
            return real(pairs)
        finally:
            with lock:
                running.pop()

    monkeypatch.setattr(engine, "logprobs", counted)
    body = {"items": [{"prompt": "Say hi.", "completion": "hi"}]}
    with ThreadPoolExecutor(3) as clients:
        replies = list(clients.map(lambda _: client.post("/v1/logprobs", json=body), range(3)))
    assert [r.status_code for r in replies] == [200, 200, 200] and max(most) == 1


def test_logprobs_agree_with_generation(client) -> None:
    from webrl.models.model_policies import actor_prompt
    from webrl.wire.contracts import ActItem

    result = client.post("/v1/act", json={"batch": [_item()], "max_new_tokens": 8}).json()["results"][0]
    engine = client.app.state.engine
    prompt = actor_prompt(engine.tokenizer, ActItem.model_validate(_item()), 1024)
    scored = client.post("/v1/logprobs", json={"items": [{"prompt": prompt, "completion": result["response"]}]})
    assert scored.status_code == 200, scored.text
    score = scored.json()["results"][0]
    assert score["n_tokens"] >= 1 and score["sum_logprob"] < 0 and 0 < score["confidence"] <= 1
    if result["token_ids"] == engine.tokenizer(result["response"], add_special_tokens=False)["input_ids"]:
        # no end of turn generated: the scored completion is the generated ids plus end of turn
        assert score["token_logprobs"][:-1] == pytest.approx(result["logprobs"], abs=1e-3)


def test_model_info(client) -> None:
    info = client.get("/v1/model").json()
    assert info["version"] == "actor-v1" and info["backend"] == "local"
    assert info["parameters"] > 0 and info["model_type"] == "llama" and info["dtype"] == "float32"


@pytest.mark.parametrize(("body", "field"), [
    ({"batch": []}, "batch"),
    ({"batch": [_item()], "temperature": 5}, "temperature"),
    ({"batch": [{"observation": {"html": HTML, "url": "u"}}]}, "batch.0.intent"),
    ({"batch": [_item()], "max_new_tokens": 0}, "max_new_tokens"),
    ({"batch": [_item()], "seed": 2**64}, "seed"),  # beyond torch's 64-bit generator seed: was a 500
])
def test_bad_act_requests_name_the_field(client, body: dict, field: str) -> None:
    reply = client.post("/v1/act", json=body)
    assert reply.status_code == 422
    assert field in [f["field"] for f in reply.json()["error"]["fields"]]


def test_bad_compat_requests_name_the_field(client) -> None:
    reply = client.post("/v1/completions", json={"prompt": "x", "max_tokens": -1})
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "max_tokens"
    reply = client.post("/generate", json={"inputs": "", "parameters": {"max_new_tokens": 4}})
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "inputs"
    reply = client.post("/v1/completions", json={"prompt": "x", "seed": 2**64})  # the fuzzer's 500
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "seed"
    reply = client.post("/generate", json={"inputs": "x", "parameters": {"seed": -1}})
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "parameters.seed"
    reply = client.post("/v1/logprobs", json={"items": [{"completion": "x"}]})
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "items.0.prompt"


def test_agent_run_refuses_hosts_off_the_allow_list(client, settings: Settings) -> None:
    from webrl.db.migrate import upgrade

    upgrade(settings)
    reply = client.post("/v1/agent/run", json={"intent": "Show me Electronics", "start_url": "http://example.com/"})
    assert reply.status_code == 422
    error = reply.json()["error"]
    assert error["fields"][0]["field"] == "start_url" and "allow-list" in error["message"]
    reply = client.post("/v1/agent/run", json={"intent": "Show me Electronics"})
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "start_url"
    reply = client.post("/v1/agent/run", json={"task_id": "sandbox/test/99999"})
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "task_id"


def test_agent_run_looks_its_stored_task_up_off_the_event_loop(client, settings: Settings,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookup is a database read: on the event loop it would stall every /v1/act the service is batching."""
    import asyncio

    from services.actor import app as actor_app
    from webrl.db.migrate import upgrade

    upgrade(settings)
    on_loop: list[bool] = []

    def noted(*args):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(*args)

    real = actor_app.resolve_run
    monkeypatch.setattr(actor_app, "resolve_run", noted)
    reply = client.post("/v1/agent/run", json={"task_id": "sandbox/test/99999"})
    assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "task_id"
    assert on_loop == [False]


def test_agent_run_without_a_browser_pool_is_a_503_naming_it(actor_model_dir: Path, settings: Settings) -> None:
    import socket

    from fastapi.testclient import TestClient

    from webrl.db.migrate import upgrade

    upgrade(settings)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    live = settings.replace(browser={"pool_url": dead})
    backend = LocalBackend.from_path(actor_model_dir, live)
    with TestClient(create_actor_app(live, engine=ActorEngine(live, backend, backend.tokenizer))) as client:
        reply = client.post("/v1/agent/run", json={"intent": "Show me Electronics",
                                                   "start_url": live.site_url("shopping") + "/"})
    assert reply.status_code == 503, reply.text
    assert dead in reply.text and "unreachable" in reply.text


def test_served_by_uvicorn(actor_model_dir: Path, settings: Settings, serve) -> None:
    backend = LocalBackend.from_path(actor_model_dir, settings)
    served = serve(create_actor_app(settings, engine=ActorEngine(settings, backend, backend.tokenizer)))
    assert httpx.get(f"{served.url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{served.url}/v1/model").json()["version"] == "actor-v1"


def test_metrics_count_the_tokens_generated(client) -> None:
    from webrl.serving.metrics import read_samples

    def scrape() -> dict[str, float]:
        return read_samples(client.get("/metrics").text)

    before = scrape()
    body = client.post("/v1/act", json={"batch": [_item(), _item("Show me Books")], "max_new_tokens": 10}).json()
    generated = sum(len(result["token_ids"]) for result in body["results"])
    after = scrape()
    assert generated > 0
    assert after["webrl_actor_tokens_generated_total"] == before["webrl_actor_tokens_generated_total"] + generated
    assert after["webrl_actor_requests_in_flight"] == 0  # the request has returned its lease


def test_the_last_request_on_a_swapped_out_backend_does_not_wait_for_its_close(actor_model_dir: Path,
                                                                                settings: Settings) -> None:
    """A lease ends on the event loop (an async route's request); the old backend's close joins its decoding worker
    (up to 30 s), so it runs in a thread of its own and the request's release returns at once."""
    import threading

    old = LocalBackend.from_path(actor_model_dir, settings)
    new = LocalBackend.from_path(actor_model_dir, settings, version="actor-v2")
    engine = ActorEngine(settings, old, old.tokenizer)
    closing, may_close, closed_in = threading.Event(), threading.Event(), []
    real_close = old.close

    def slow_close() -> None:  # a worker still finishing its queued requests
        closed_in.append(threading.current_thread().name)
        closing.set()
        may_close.wait(30)
        real_close()

    old.close = slow_close
    try:
        with engine.lease() as leased:
            assert leased is old
            engine.swap(new)
            assert not closing.is_set()  # a request still holds the old backend
        assert closing.wait(10) and closed_in == ["retire-backend"]  # closed, off the releasing thread
        assert engine.version == "actor-v2"
    finally:
        may_close.set()
        new.close()
