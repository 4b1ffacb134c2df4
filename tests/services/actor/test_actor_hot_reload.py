"""Hot reload: a checkpoint event on Redis swaps the served actor; requests in flight finish, none fail."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from services.actor.app import create_actor_app
from services.actor.engine import ActorEngine
from webrl.config import Settings
from webrl.models.backends.local import LocalBackend
from webrl.store.checkpoints import publish_folder

pytestmark = pytest.mark.redis

ITEM = {"intent": "Show me Electronics", "observation": {"html": '<a id="3"> Electronics </a>', "url": "u"}}


def _publish(folder: Path, dest: Path, version: str):
    return publish_folder(lambda tmp: shutil.copytree(folder, tmp, dirs_exist_ok=True), dest, role="actor",
                          version=version)


def _wait(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_checkpoint_event_swaps_the_actor_without_dropping_requests(
        actor_model_dir: Path, second_model_dir: Path, tmp_path: Path, settings: Settings, redis_url: str,
        serve) -> None:
    settings = settings.replace(jobs={"redis_url": redis_url})
    channel = f"webrl:checkpoints:test-{uuid.uuid4().hex[:8]}"  # this test's own channel
    v1 = _publish(actor_model_dir, tmp_path / "ckpt" / "v1", "phase0-a")
    v2 = _publish(second_model_dir, tmp_path / "ckpt" / "v2", "phase1-b")
    backend = LocalBackend.from_path(v1.path, settings)
    engine = ActorEngine(settings, backend, backend.tokenizer)
    server = serve(create_actor_app(settings, engine=engine, channel=channel))
    assert httpx.get(f"{server.url}/v1/model").json()["version"] == "phase0-a"

    client = redis.Redis.from_url(redis_url)
    client.publish(channel, json.dumps({"role": "critic", "version": "x", "path": v2.path, "sha256": v2.sha256}))
    client.publish(channel, json.dumps({**v2.event(), "sha256": "0" * 64}))  # tampered: refused

    def act() -> dict:
        reply = httpx.post(f"{server.url}/v1/act", json={"batch": [ITEM], "max_new_tokens": 128}, timeout=120)
        assert reply.status_code == 200, reply.text
        return reply.json()

    with ThreadPoolExecutor(max_workers=6) as pool:
        in_flight = [pool.submit(act) for _ in range(6)]
        _wait(lambda: engine.in_flight > 0)
        client.publish(channel, json.dumps(v2.event()))
        _wait(lambda: engine.version == "phase1-b")
        answers = [f.result() for f in in_flight]
    client.close()

    assert {a["version"] for a in answers} <= {"phase0-a", "phase1-b"}
    assert "phase0-a" in {a["version"] for a in answers}  # started before the swap, finished on the old model
    info = httpx.get(f"{server.url}/v1/model").json()
    assert info["version"] == "phase1-b" and info["reloads"] == 1 and info["path"] == v2.path
    assert act()["version"] == "phase1-b"
    assert server.server.started  # still serving after the old backend closed
