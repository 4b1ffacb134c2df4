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


def test_a_task_the_pool_cannot_evaluate_is_returned_unscored(stack) -> None:
    """A stored task whose evaluator the harness cannot build (an eval type it does not know): the pool refuses its
    evaluation (422) and the run comes back with its steps and no score, as a rollout on the pool's own browsers
    does (it was a 500, and the episode was lost)."""
    from webrl.agent.schemas import TaskConfig
    from webrl.db import repository
    from webrl.db.session import session_scope

    live, actor = stack
    config = TaskConfig(task_id=9001, sites=["shopping"], intent="What is the store's motto?",
                        start_url="__SHOPPING__/", eval={"eval_types": ["screenshot_match"]})
    with session_scope(live) as session:
        repository.upsert_task(session, "adhoc/unknown-eval", config, origin="seed", split="train")
    reply = httpx.post(f"{actor.url}/v1/agent/run", json={"task_id": "adhoc/unknown-eval", "max_steps": 1}, timeout=300)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["env_score"] is None and len(body["trajectory"]["steps"]) == 1


async def test_a_refused_pool_call_is_a_502_naming_the_pools_answer(settings: Settings, serve) -> None:
    """Any other refusal of the pool (here: an episode the pool does not hold) is the actor's 502 with the pool's
    status and message, not a 500."""
    from fastapi import FastAPI, HTTPException

    from services.actor.agent import PoolRefusedError, RemoteEpisode
    from webrl.agent.schemas import TaskConfig

    pool = FastAPI()

    @pool.post("/v1/episodes/{episode_id}/step")
    async def step(episode_id: str) -> None:
        raise HTTPException(status_code=404, detail=f"no episode {episode_id}")

    served = serve(pool)
    task = TaskConfig(task_id=1, sites=["shopping"], intent="x", start_url="http://127.0.0.1/")
    episode = RemoteEpisode(task, settings.replace(browser={"pool_url": served.url}))
    episode.id = "gone"
    with pytest.raises(PoolRefusedError, match="404 no episode gone") as refused:
        await episode.step('do(action="Scroll Down")')
    assert refused.value.status == 404
    await episode.close()
