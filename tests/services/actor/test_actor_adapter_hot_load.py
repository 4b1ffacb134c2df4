"""Adapter checkpoints hot-loaded into a model server by the actor service's openai backend: the real actor service
(uvicorn, Redis) in front of a vLLM stand-in served over HTTP (vllm_standin.py; test_actor_vllm.py runs the same
flow against vLLM itself). An announced adapter is loaded under its version, rollouts are routed to it, ``GET
/v1/model`` acknowledges it; an adapter no request uses any more is unloaded; full-weight checkpoints go back to the
server's own model (its supervisor restarts it on them)."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from vllm_standin import VLLMStandIn

from services.actor.app import create_actor_app
from services.actor.engine import ActorEngine
from webrl.config import Settings
from webrl.models.backends.openai_compat import AdapterLoadError, OpenAIBackend
from webrl.models.loading import load_tokenizer
from webrl.policies.actor_service import serve_checkpoint
from webrl.store.checkpoints import publish_folder

HTML = '<html> <a id="3"> Electronics </a> <a id="4"> Books </a> </html>'
ITEM = {"intent": "Show me Electronics", "observation": {"html": HTML, "url": "http://127.0.0.1:7770/"}}


def _adapter(actor_model_dir: Path, dest: Path, version: str) -> Path:
    """A published adapter checkpoint: the actor's tokenizer and a peft config (the stand-in reads no weights)."""
    def write(folder: Path) -> None:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            if (actor_model_dir / name).is_file():
                shutil.copy(actor_model_dir / name, folder / name)
        (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 16}')

    return Path(publish_folder(write, dest, role="actor", version=version).path)


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def standin(actor_model_dir: Path, serve) -> tuple[VLLMStandIn, str]:
    server = VLLMStandIn(str(actor_model_dir), str(actor_model_dir))
    return server, serve(server.app()).url


def _engine(settings: Settings, actor_model_dir: Path, url: str) -> ActorEngine:
    backend = OpenAIBackend(url, str(actor_model_dir))
    return ActorEngine(settings, backend, load_tokenizer(str(actor_model_dir), settings), path=str(actor_model_dir))


@pytest.mark.redis
def test_an_announced_adapter_is_hot_loaded_routed_to_and_acknowledged(
        actor_model_dir: Path, settings: Settings, redis_url: str, standin, serve, tmp_path: Path) -> None:
    vllm, url = standin
    channel = f"webrl:checkpoints:test-{uuid.uuid4().hex[:8]}"
    live = settings.replace(actor={"backend": "openai", "endpoint": url, "model": str(actor_model_dir)},
                            jobs={"redis_url": redis_url})
    actor = serve(create_actor_app(live, channel=channel))
    client = settings.replace(actor={"url": actor.url}, jobs={"redis_url": redis_url})

    first = _adapter(actor_model_dir, tmp_path / "ckpt" / "phase1", "phase1-actor")
    assert serve_checkpoint(client, str(first), timeout_s=30, channel=channel) == "phase1-actor"
    assert vllm.adapters == {"phase1-actor": str(first)}
    model = httpx.get(f"{actor.url}/v1/model").json()
    assert (model["version"], model["backend"], model["path"], model["reloads"], model["reload_error"]) == (
        "phase1-actor", "openai", str(first), 1, None)
    acted = httpx.post(f"{actor.url}/v1/act", json={"batch": [ITEM], "max_new_tokens": 4}, timeout=30).json()
    assert acted["version"] == "phase1-actor" and acted["results"][0]["response"] == "phase1-actor"
    assert vllm.asked[-1] == "phase1-actor"

    second = _adapter(actor_model_dir, tmp_path / "ckpt" / "phase2", "phase2-actor")
    assert serve_checkpoint(client, str(second), timeout_s=30, channel=channel) == "phase2-actor"
    _until(lambda: "phase1-actor" not in vllm.adapters, "phase 1's adapter, no longer used, is unloaded")
    assert vllm.adapters == {"phase2-actor": str(second)}
    acted = httpx.post(f"{actor.url}/v1/act", json={"batch": [ITEM], "max_new_tokens": 4}, timeout=30).json()
    assert acted["version"] == "phase2-actor" and vllm.asked[-1] == "phase2-actor"


def test_an_adapter_stays_loaded_while_a_request_uses_it(actor_model_dir: Path, settings: Settings, standin,
                                                          tmp_path: Path) -> None:
    vllm, url = standin
    engine = _engine(settings, actor_model_dir, url)
    first = _adapter(actor_model_dir, tmp_path / "a1", "a1")
    assert engine.reload(str(first), "a1") == "a1"
    with engine.lease() as in_flight:
        engine.reload(str(_adapter(actor_model_dir, tmp_path / "a2", "a2")), "a2")
        time.sleep(0.3)
        assert set(vllm.adapters) == {"a1", "a2"}  # a request still runs on a1
        assert in_flight.generate(["x"], 2, 0.0)[0].text == "a1"
    _until(lambda: set(vllm.adapters) == {"a2"}, "a1 is unloaded once its last request ends")
    engine.close()
    assert set(vllm.adapters) == {"a2"}  # shutting the service down leaves the server's adapters alone


def test_a_full_weight_checkpoint_goes_back_to_the_served_model(actor_model_dir: Path, second_model_dir: Path,
                                                                settings: Settings, standin, tmp_path: Path) -> None:
    vllm, url = standin
    engine = _engine(settings.replace(actor={"model": str(actor_model_dir)}), actor_model_dir, url)
    engine.reload(str(_adapter(actor_model_dir, tmp_path / "a1", "a1")), "a1")
    engine.reload(str(second_model_dir), "full-2")  # the supervisor restarts vLLM on it; nothing to load here
    _until(lambda: not vllm.adapters, "the adapter is unloaded")
    assert engine.backend.generate(["x"], 2, 0.0)[0].text == str(actor_model_dir)
    assert engine.describe()["version"] == "actor-v1"  # what the server reports it serves (its root's version)


def test_an_adapter_the_server_lost_is_loaded_again(actor_model_dir: Path, standin, tmp_path: Path) -> None:
    vllm, url = standin
    backend = OpenAIBackend(url, str(actor_model_dir)).with_adapter(
        str(_adapter(actor_model_dir, tmp_path / "a1", "a1")), "a1")
    vllm.adapters.clear()  # vLLM restarted, or another actor replica unloaded it
    assert backend.generate(["x", "y"], 2, 0.0)[1].text == "a1"
    vllm.adapters.clear()
    assert backend.refresh_version() == "a1" and "a1" in vllm.adapters
    assert vllm.loads == ["a1", "a1", "a1"]
    backend.retire()
    assert not vllm.adapters


def test_a_refused_adapter_keeps_the_served_one(actor_model_dir: Path, settings: Settings, standin,
                                               tmp_path: Path) -> None:
    vllm, url = standin
    engine = _engine(settings, actor_model_dir, url)
    first = _adapter(actor_model_dir, tmp_path / "a1", "a1")
    engine.reload(str(first), "a1")
    unseen = _adapter(actor_model_dir, tmp_path / "a2", "a2")
    vllm.unmounted.add(str(unseen))
    with pytest.raises(AdapterLoadError, match=r"did not load adapter a2 from .*: 404 Loading lora a2 failed: "
                                               r"No adapter found for"):
        engine.reload(str(unseen), "a2")
    assert engine.version == "a1" and vllm.adapters == {"a1": str(first)}
    assert engine.backend.generate(["x"], 2, 0.0)[0].text == "a1"
