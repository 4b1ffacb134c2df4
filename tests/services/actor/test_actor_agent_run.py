"""Agent run end to end: the actor service drives a sandbox task through the browser pool service (both
served by uvicorn on free ports), and returns the trajectory and the evaluator's score."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from services.actor.app import create_actor_app
from services.actor.engine import ActorEngine
from webrl.config import Settings
from webrl.models.backends.local import LocalBackend

pytestmark = pytest.mark.browser


@pytest.fixture
def stack(actor_model_dir: Path, settings: Settings, serve):
    from services.browser_pool.app import create_app_for_service
    from webrl.db.migrate import upgrade
    from webrl.sandbox.server import running_sandbox
    from webrl.sandbox.tasks.suite import load_suite

    upgrade(settings)
    load_suite(settings, 0)
    with running_sandbox(settings.replace(browser={"pool_size": 1})) as live:
        pool = serve(create_app_for_service(live))
        live = live.replace(browser={"pool_url": pool.url}, actor={"max_new_tokens": 16})
        backend = LocalBackend.from_path(actor_model_dir, live)
        actor = serve(create_actor_app(live, engine=ActorEngine(live, backend, backend.tokenizer)))
        yield live, actor


def test_agent_run_on_stored_task_and_on_intent(stack) -> None:
    live, actor = stack
    reply = httpx.post(f"{actor.url}/v1/agent/run", json={"task_id": "sandbox/test/0", "max_steps": 2},
                       timeout=300)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    traj = body["trajectory"]
    assert body["version"] == "actor-v1" == traj["actor_version"]
    assert 1 <= len(traj["steps"]) <= 2 and traj["steps"][-1]["done"]
    first = traj["steps"][0]
    assert first["observation"]["url"].startswith(live.site_url(traj_site(traj["task_id"])))
    assert 'id="' in first["observation"]["html"] and len(first["token_ids"]) == len(first["logprobs"]) > 0
    assert body["env_score"] in (0.0, 1.0) and traj["stop_reason"] in {"max_steps", "exit", "parse_failures"}
    assert traj["last_observation"]["html"]

    # an ad-hoc intent on an allowed start_url
    reply = httpx.post(f"{actor.url}/v1/agent/run", timeout=300, json={
        "intent": "Show me the Electronics category", "start_url": live.site_url("shopping") + "/", "max_steps": 1})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert len(body["trajectory"]["steps"]) == 1 and body["env_score"] is None  # no evaluator for ad-hoc intents


def traj_site(task_key: str) -> str:
    from webrl.sandbox.tasks.suite import build_suite

    task_id = int(task_key.rsplit("/", 1)[-1])
    return next(t.site for t in build_suite(0)["test"] if t.task_id == task_id)
