"""serve_checkpoint, what the pipeline does before a rollout through the actor service: it announces the
checkpoint a rollout needs on Redis and returns once the real (uvicorn) service reports serving it, or stops with
the reason."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from services.actor.app import create_actor_app
from services.actor.engine import ActorEngine
from webrl.config import Settings
from webrl.models.backends.local import LocalBackend
from webrl.policies.actor_service import ActorNotServing, serve_checkpoint, serving
from webrl.store.checkpoints import MANIFEST_FILE, publish_folder

pytestmark = pytest.mark.redis


def _published(folder: Path, dest: Path, version: str) -> Path:
    info = publish_folder(lambda tmp: shutil.copytree(folder, tmp, dirs_exist_ok=True), dest, role="actor",
                          version=version)
    return Path(info.path)


def test_the_service_reloads_the_announced_checkpoint_and_reports_it(
        actor_model_dir: Path, second_model_dir: Path, tmp_path: Path, settings: Settings, redis_url: str,
        serve) -> None:
    channel = f"webrl:checkpoints:test-{uuid.uuid4().hex[:8]}"  # this test's own channel
    live = settings.replace(actor={"model": str(actor_model_dir)}, jobs={"redis_url": redis_url})
    served = serve(create_actor_app(live, channel=channel))
    client = settings.replace(actor={"url": served.url}, jobs={"redis_url": redis_url})
    assert serve_checkpoint(client, str(actor_model_dir), timeout_s=1, channel=channel) == "actor-v1"  # as is
    assert httpx.get(f"{served.url}/v1/model").json()["reloads"] == 0

    trained = _published(second_model_dir, tmp_path / "ckpt" / "phase1", "phase1-actor")
    assert serve_checkpoint(client, str(trained), timeout_s=60, channel=channel) == "phase1-actor"
    model = httpx.get(f"{served.url}/v1/model").json()
    assert (model["version"], model["reloads"], model["path"], model["reload_error"]) == (
        "phase1-actor", 1, str(trained), None)
    assert serving(client).version == "phase1-actor"

    tampered = _published(actor_model_dir, tmp_path / "ckpt" / "phase2", "phase2-actor")
    manifest = json.loads((tampered / MANIFEST_FILE).read_text())
    (tampered / MANIFEST_FILE).write_text(json.dumps({**manifest, "sha256": "0" * 64}))
    with pytest.raises(ActorNotServing, match=r"still serving 'phase1-actor', not 'phase2-actor' .*2 s on: .*its "
                                              r"last reload failed: refused phase2-actor: .* does not hash"):
        serve_checkpoint(client, str(tampered), timeout_s=2, channel=channel)


def test_an_unreachable_service_or_no_redis_is_a_clear_error(actor_model_dir: Path, settings: Settings,
                                                             serve) -> None:
    nowhere = settings.replace(actor={"url": "http://127.0.0.1:9"})
    with pytest.raises(ActorNotServing, match=r"cannot ask the actor service what it serves \(GET "
                                              r"http://127.0.0.1:9/v1/model, WEBRL_ACTOR__URL\)"):
        serve_checkpoint(nowhere, str(actor_model_dir), timeout_s=1)
    served = serve(create_actor_app(settings.replace(actor={"model": str(actor_model_dir)})))
    unannounced = settings.replace(actor={"url": served.url}, jobs={"redis_url": None})
    with pytest.raises(ActorNotServing, match="without WEBRL_JOBS__REDIS_URL the reload cannot be announced"):
        serve_checkpoint(unannounced, str(actor_model_dir.parent / "missing-actor"), timeout_s=1)


@pytest.mark.parametrize("backend", ["openai", "tgi"])
def test_a_remote_backend_reports_the_checkpoint_its_server_holds(
        backend: str, actor_model_dir: Path, second_model_dir: Path, tmp_path: Path, settings: Settings,
        serve) -> None:
    """An actor service in front of a model server (vLLM, TGI; here a webrl actor, which answers the same
    ``/v1/models`` and ``/info``) reports the version of the folder the server loaded, follows the server when it
    reloads on its own (vLLM's supervisor), labels its actions with it, and serve_checkpoint waits for it."""
    upstream_backend = LocalBackend.from_path(actor_model_dir, settings)
    upstream = ActorEngine(settings, upstream_backend, upstream_backend.tokenizer, path=str(actor_model_dir))
    server = serve(create_actor_app(settings, engine=upstream))
    front = serve(create_actor_app(settings.replace(actor={"backend": backend, "endpoint": server.url,
                                                           "model": str(actor_model_dir)})))
    client = settings.replace(actor={"url": front.url}, jobs={"redis_url": None})
    model = httpx.get(f"{front.url}/v1/model").json()
    assert (model["backend"], model["version"], model["server_error"]) == (backend, "actor-v1", None)

    trained = _published(second_model_dir, tmp_path / "ckpt" / "phase1", "phase1-actor")
    with pytest.raises(ActorNotServing, match=r"still serving 'actor-v1', not 'phase1-actor' .*1 s on: .*its "
                                              rf"{backend} server serves 'actor-v1'.*vllm_supervisor"):
        serve_checkpoint(client, str(trained), timeout_s=1)  # nothing to announce to: the server reloads itself
    upstream.reload(str(trained))  # what the supervisor does when the trainer publishes
    assert serve_checkpoint(client, str(trained), timeout_s=10) == "phase1-actor"
    act = httpx.post(f"{front.url}/v1/act", json={"batch": [{
        "intent": "Show me Electronics", "observation": {"html": '<html><a id="3">Electronics</a></html>',
                                                         "url": "http://127.0.0.1:7770/"}}],
        "max_new_tokens": 4}, timeout=60).json()
    assert act["version"] == "phase1-actor"
