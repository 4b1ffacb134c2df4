"""The llm generator against a real webrl actor's OpenAI-compatible `/v1/completions` (served by uvicorn):
what the model answers is parsed, and malformed answers are rejected with a reason, storing nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import uvicorn
from local_ports import free_port

from services.taskgen.curriculum import generate_llm
from services.taskgen.llm import OpenAICompatibleLLM
from webrl.config import Settings, get_settings
from webrl.db import repository as repo
from webrl.db.session import session_scope


@pytest.fixture
def actor_endpoint(settings: Settings, tmp_path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real actor service with a randomly initialised test-size model (it answers junk, as such models do)."""
    from services.actor.app import create_actor_app
    from webrl.models.tiny import build_tiny_folder

    model = build_tiny_folder(["Find the cheapest red mug", "`List my orders`", "do(action=\"Click\")"] * 10,
                              tmp_path / "model", size="test", vocab_size=300, seed=0)
    port = free_port()
    monkeypatch.setenv("WEBRL_ACTOR__MODEL", str(model))
    monkeypatch.setenv("WEBRL_SECURITY__ALLOWED_ENDPOINTS", f"http://127.0.0.1:{port}")  # taskgen sends only there
    get_settings.cache_clear()
    server = uvicorn.Server(uvicorn.Config(create_actor_app(get_settings()), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=20)


def test_completions_endpoint_answers_and_junk_is_rejected(actor_endpoint: str, settings: Settings,
                                                           parent_task: Callable[..., None]) -> None:
    s = get_settings()
    parent_task(s)
    llm = OpenAICompatibleLLM(actor_endpoint, model="actor", mode="completions", max_tokens=24)
    answer = llm.complete("Write tasks in backticks:", temperature=0.0)
    assert isinstance(answer, str) and answer  # a real completion came back over HTTP

    result = generate_llm(s, phase=1, parent_keys=["p1"], n=3, seed=0, endpoint=actor_endpoint, model="actor",
                          mode="completions", feasibility=False)
    # an untrained model cannot write a usable task: every span it produced is rejected with a reason
    assert result.task_keys == []
    assert result.rejected and all(r.reason for r in result.rejected)
    with session_scope(s) as session:
        assert [t.key for t in repo.tasks_where(session)] == ["p1"]
