"""Bounded work at the actor: request caps (prompts, history, body size), a timeout on model work, and health
checks that answer while a long request is in flight (served by uvicorn, a real tiny model)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from services.actor.app import create_actor_app
from services.actor.engine import ActorEngine
from services.actor.route_records import MAX_PROMPTS
from webrl.config import Settings
from webrl.models.backends.local import LocalBackend
from webrl.wire.contracts import MAX_EPISODE_STEPS

HTML = '<html> <a id="3"> Electronics </a> <a id="4"> Books </a> </html>'


def _app(actor_model_dir: Path, settings: Settings):
    backend = LocalBackend.from_path(actor_model_dir, settings)
    return create_actor_app(settings, engine=ActorEngine(settings, backend, backend.tokenizer))


def _item(history: list[str], html: str = HTML) -> dict:
    return {"intent": "Show me Electronics", "observation": {"html": html, "url": "http://127.0.0.1:7770/"},
            "history": history}


def test_completions_take_at_most_max_prompts(actor_model_dir: Path, settings: Settings) -> None:
    with TestClient(_app(actor_model_dir, settings)) as client:
        reply = client.post("/v1/completions", json={"prompt": ["x"] * (MAX_PROMPTS + 1), "max_tokens": 1})
        assert reply.status_code == 422, reply.text
        error = reply.json()["error"]
        assert error["fields"][0]["field"] == "prompt" and f"at most {MAX_PROMPTS} prompts" in error["message"]
        assert client.post("/v1/completions", json={"prompt": ["x"] * 2, "max_tokens": 1}).status_code == 200


def test_a_history_longer_than_an_episode_is_a_422(actor_model_dir: Path, settings: Settings) -> None:
    with TestClient(_app(actor_model_dir, settings)) as client:
        reply = client.post("/v1/act", json={"batch": [_item(['do(action="Scroll Down")'] * (MAX_EPISODE_STEPS + 1))]})
        assert reply.status_code == 422 and reply.json()["error"]["fields"][0]["field"] == "batch.0.history"


def test_bodies_over_the_limit_are_413_and_batch_routes_take_more(actor_model_dir: Path, settings: Settings) -> None:
    small = settings.replace(limits={"max_request_bytes": 64 * 1024, "max_batch_request_bytes": 512 * 1024})
    page = HTML * 2000  # ~130 KB
    with TestClient(_app(actor_model_dir, small)) as client:
        reply = client.post("/generate", json={"inputs": page, "parameters": {"max_new_tokens": 1}})
        assert reply.status_code == 413, reply.text
        error = reply.json()["error"]
        assert error["type"] == "payload_too_large" and "65536 bytes POST /generate takes" in error["message"]
        assert "WEBRL_LIMITS__MAX_REQUEST_BYTES" in error["message"]

        def chunks():  # no Content-Length: the limit counts what arrives
            for _ in range(100):
                yield b" " * 1024

        streamed = client.post("/generate", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413, streamed.text
        act = client.post("/v1/act", json={"batch": [_item([], page)], "max_new_tokens": 2})
        assert act.status_code == 200, act.text  # a batch route takes max_batch_request_bytes
        over = client.post("/v1/act", json={"batch": [_item([], page)] * 5, "max_new_tokens": 2})
        assert over.status_code == 413 and "524288 bytes POST /v1/act takes" in over.json()["error"]["message"]


def test_model_work_over_the_timeout_is_a_504(actor_model_dir: Path, settings: Settings) -> None:
    hurried = settings.replace(limits={"model_request_timeout_s": 0.05})
    with TestClient(_app(actor_model_dir, hurried)) as client:
        reply = client.post("/v1/act", json={"batch": [_item([])] * 16, "max_new_tokens": 512})
        assert reply.status_code == 504, reply.text
        error = reply.json()["error"]
        assert error["type"] == "timeout" and "WEBRL_LIMITS__MODEL_REQUEST_TIMEOUT_S" in error["message"]
        assert client.get("/healthz").status_code == 200


def test_healthz_answers_while_a_long_act_is_in_flight(actor_model_dir: Path, settings: Settings, serve) -> None:
    """Prompts of long histories and pages are built in a thread: /healthz keeps answering meanwhile (building
    them on the event loop stalled it for the whole request). No wall-clock limit: the longest wait for a
    health answer is compared with the request's own duration."""
    served = serve(_app(actor_model_dir, settings))
    history = [f'# Element: the link of product {i}\ndo(action="Click", element="{i}")'
               for i in range(MAX_EPISODE_STEPS)]
    body = {"batch": [_item(history, HTML * 20)] * 32, "max_new_tokens": 1}
    done = threading.Event()
    act: dict[str, float | int] = {}

    def post_act() -> None:
        act["start"] = time.monotonic()
        act["status"] = httpx.post(f"{served.url}/v1/act", json=body, timeout=600).status_code
        act["end"] = time.monotonic()
        done.set()

    thread = threading.Thread(target=post_act)
    with httpx.Client(base_url=served.url, timeout=600) as health:
        health.get("/healthz")  # connected before the long request starts
        thread.start()
        answers = []
        while not done.is_set():
            assert health.get("/healthz").json()["status"] == "ok"
            answers.append(time.monotonic())
    thread.join()
    assert act["status"] == 200
    during = [t for t in answers if t < act["end"]]
    gaps = [b - a for a, b in zip([act["start"], *during], [*during, act["end"]], strict=True)]
    assert len(during) >= 5 and max(gaps) < (act["end"] - act["start"]) / 3, (len(during), max(gaps), act)


def test_a_generated_nul_never_reaches_the_next_request(actor_model_dir: Path, settings: Settings) -> None:
    """A byte-level model can sample byte 0; the response comes back as history in the episode's next /v1/act,
    which refuses NUL with a 422, so the engine answers without it (webrl.text)."""
    from webrl.models.backends.base import Generation

    backend = LocalBackend.from_path(actor_model_dir, settings)
    engine = ActorEngine(settings, backend, backend.tokenizer)
    result = engine._result(Generation(text='do(action="Click", element="3")\x00'), "prompt", "v1")
    assert "\x00" not in result.response and result.response.endswith("\ufffd")
    with TestClient(_app(actor_model_dir, settings)) as client:
        reply = client.post("/v1/act", json={"batch": [_item([result.response])], "max_new_tokens": 2})
        assert reply.status_code == 200, reply.text
