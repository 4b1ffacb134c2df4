"""REST: an episode round trip (create, step, evaluate, delete), validation errors, rollout jobs."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from fastapi.testclient import TestClient

from services.browser_pool.app import create_app_for_service

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def client(pool_settings):
    settings = pool_settings.replace(browser={"pool_size": 1})
    with TestClient(create_app_for_service(settings)) as c:
        yield c


def test_fixture_round_trip(client, fixture_url, make_task):
    task = make_task(f"{fixture_url}/actions.html").to_json()
    created = client.post("/v1/episodes", json={"task": task})
    assert created.status_code == 200, created.text
    episode_id, obs = created.json()["episode_id"], created.json()["observation"]
    assert "Count: 0" in obs["html"] and obs["title"] == "Actions fixture"
    add = re.search(r'<button id="(\d+)"> Add one', obs["html"]).group(1)
    stepped = client.post(f"/v1/episodes/{episode_id}/step", json={"action": f'do(action="Click", element="{add}")'})
    body = stepped.json()
    assert stepped.status_code == 200 and "Count: 1" in body["observation"]["html"] and body["error"] is None
    assert body["action"] == f'do(action="Click", element="{add}")' and body["done"] is False
    bad = client.post(f"/v1/episodes/{episode_id}/step", json={"action": "click it"}).json()
    assert bad["action"] is None and bad["parse_error"] and "could not parse" in bad["observation"]["error"]
    done = client.post(f"/v1/episodes/{episode_id}/step", json={"action": 'exit(message="1")'}).json()
    assert done["done"] and done["answer"] == "1"
    scored = client.post(f"/v1/episodes/{episode_id}/evaluate", json={"answer": "1"})
    assert scored.status_code == 200 and scored.json() == {"score": None}  # no eval block
    assert client.delete(f"/v1/episodes/{episode_id}").json() == {"deleted": episode_id}
    gone = client.post(f"/v1/episodes/{episode_id}/step", json={"action": 'do(action="Scroll Down")'})
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "not_found"


def test_metrics_show_the_episodes_in_flight(client, fixture_url, make_task):
    from webrl.serving.metrics import read_samples

    def scrape() -> dict[str, float]:
        return read_samples(client.get("/metrics").text)

    assert scrape()["webrl_browser_pool_size"] == 1
    idle = scrape()["webrl_browser_episodes_in_flight"]
    episode_id = client.post("/v1/episodes", json={"task": make_task(f"{fixture_url}/actions.html").to_json()}
                             ).json()["episode_id"]
    assert scrape()["webrl_browser_episodes_in_flight"] == idle + 1
    client.delete(f"/v1/episodes/{episode_id}")
    assert scrape()["webrl_browser_episodes_in_flight"] == idle


def test_validation_errors_name_the_field(client, fixture_url, make_task):
    both = client.post("/v1/episodes", json={"task": make_task(fixture_url).to_json(), "task_key": "x"})
    assert both.status_code == 422 and "exactly one of 'task' or 'task_key'" in both.json()["error"]["message"]
    no_intent = client.post("/v1/episodes", json={"task": {"task_id": 1, "sites": [], "start_url": "x"}})
    assert no_intent.status_code == 422 and "task.intent" in no_intent.json()["error"]["message"]
    missing = client.post("/v1/episodes/abc/step", json={})
    assert missing.status_code == 422 and "action" in missing.json()["error"]["message"]
    rollout = client.post("/v1/rollouts", json={"task_keys": [], "policy": {"kind": "oracle"}})
    assert rollout.status_code == 422 and "task_keys" in rollout.json()["error"]["message"]
    twice = client.post("/v1/rollouts", json={"task_keys": ["k", "j", "k"], "policy": {"kind": "oracle"}})
    error = twice.json()["error"]  # refused before the unknown keys are looked up: no job, nothing stored
    assert twice.status_code == 422 and error["fields"][0]["field"] == "task_keys", twice.text
    assert "repeated task keys" in error["message"] and error["message"].endswith(": k"), error["message"]
    typo = client.post("/v1/rollouts", json={"task_keys": ["k"], "policy": {"kind": "oracle", "corupt": 0.5}})
    assert typo.status_code == 422 and "policy.oracle.corupt" in typo.json()["error"]["message"]
    anywhere = client.post("/v1/rollouts", json={"task_keys": ["k"], "policy": {"kind": "endpoint",
                                                                                "url": "http://127.0.0.1:1"}})
    error = anywhere.json()["error"]
    assert anywhere.status_code == 422 and error["fields"][0]["field"] == "policy"
    assert "not a configured endpoint" in error["message"]
    for path in ("/etc", "/nonexistent-webrl"):  # a checkpoint folder outside the model roots: nothing is loaded
        loaded = client.post("/v1/rollouts", json={"task_keys": ["k"], "policy": {"kind": "checkpoint", "path": path}})
        error = loaded.json()["error"]
        assert loaded.status_code == 422 and error["fields"][0]["field"] == "policy.path", loaded.text
        assert "outside the artifacts store" in error["message"]
    assert client.get("/v1/jobs/nope").status_code == 404
    assert client.delete("/v1/episodes/nope").status_code == 404


def test_a_rollout_of_tasks_the_database_lacks_is_a_422_before_any_job(pool_settings, tmp_path):
    from webrl.db.migrate import upgrade

    settings = pool_settings.replace(browser={"pool_size": 1}, database={"url": f"sqlite:///{tmp_path / 'w.db'}"})
    upgrade(settings)  # an empty task table
    with TestClient(create_app_for_service(settings)) as c:
        unknown = c.post("/v1/rollouts", json={"task_keys": ["no-such-task"], "policy": {"kind": "oracle"}})
    error = unknown.json()["error"]  # refused as the request, not a queued job that fails later
    assert unknown.status_code == 422 and error["fields"][0]["field"] == "task_keys", unknown.text
    assert "no-such-task" in error["message"] and "webrl tasks load" in error["message"]


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:18999\\@127.0.0.1:8102",  # urlsplit: the actor's port; a WHATWG reader: port 18999
    "http://user:secret@127.0.0.1:8102",
    "http://user@127.0.0.1:8102",
    "http://127.0.0.1:8102/v1\\act",
])
def test_an_endpoint_url_with_user_info_or_a_backslash_is_a_422_naming_policy(client, url):
    """The configured actor (http://127.0.0.1:8102) read one way, another server read another: no honest url
    carries either, so the rollout is refused before any job starts."""
    reply = client.post("/v1/rollouts", json={"task_keys": ["k"], "policy": {"kind": "endpoint", "url": url}})
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["fields"][0]["field"] == "policy" and "url" in error["message"], error


def test_start_urls_are_checked_by_the_pool(client, fixture_url, outside, make_task):
    """The pool itself refuses non-http(s) start URLs (422 naming the field) and blocks a start URL that
    redirects off the allow-list (noted in the observation)."""
    for url in ("chrome://version", "data:text/html,<h1>hi</h1>", "javascript:alert(1)", "file:///etc/passwd"):
        reply = client.post("/v1/episodes", json={"task": make_task(url).to_json()})
        assert reply.status_code == 422, url
        error = reply.json()["error"]
        assert error["fields"][0]["field"] == "task.start_url" and "not an http(s) URL" in error["message"], url
    target = f"{outside.url}/outside.html"
    outside.paths.clear()
    created = client.post("/v1/episodes", json={"task": make_task(f"{fixture_url}/redirect?to={target}").to_json()})
    assert created.status_code == 200, created.text
    obs = created.json()["observation"]
    assert "You reached the outside host" not in obs["html"] and f"blocked navigation to {target}" in obs["error"]
    assert outside.paths == []
    client.delete(f"/v1/episodes/{created.json()['episode_id']}")


@pytest.mark.slow
def test_sandbox_round_trip_and_rollout_job(sandbox, sandbox_tasks, stored_keys):
    """A stored sandbox task through REST, driven by the oracle, scored by its evaluator; then a job."""
    import asyncio

    from webrl.agent.policy import PolicyRequest
    from webrl.agent.schemas import Observation, Step
    from webrl.db import repository
    from webrl.db.session import session_scope
    from webrl.sandbox.oracles import OraclePolicy

    keys = stored_keys(sandbox, sandbox_tasks[:2], prefix="rest/test")
    oracle = OraclePolicy()
    with TestClient(create_app_for_service(sandbox.replace(browser={"pool_size": 1}))) as c:
        created = c.post("/v1/episodes", json={"task_key": keys[0]}).json()
        episode_id, obs = created["episode_id"], Observation.model_validate(created["observation"])
        task = sandbox_tasks[0].resolved(sandbox)
        history: list[Step] = []
        for index in range(30):
            request = PolicyRequest(task=task, intent=task.intent, observation=obs, history=history)
            text = asyncio.run(oracle.act([request]))[0].response
            body = c.post(f"/v1/episodes/{episode_id}/step", json={"action": text}).json()
            history.append(Step(index=index, observation=obs, response=text))
            obs = Observation.model_validate(body["observation"])
            if body["done"]:
                break
        assert body["done"] and body["error"] is None
        assert c.post(f"/v1/episodes/{episode_id}/evaluate", json={"answer": body["answer"]}).json() == {"score": 1.0}
        c.delete(f"/v1/episodes/{episode_id}")

        job = c.post("/v1/rollouts", json={"task_keys": keys, "phase": 0, "attempt": 7, "purpose": "eval",
                                           "policy": {"kind": "oracle"}, "concurrency": 1})
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 120
        while (view := c.get(f"/v1/jobs/{job.json()['job_id']}").json())["status"] == "running":
            assert time.monotonic() < deadline, view
            time.sleep(0.2)
        assert view["status"] == "succeeded", view
        assert len(view["result"]["trajectory_ids"]) == 2 and view["result"]["mean_env_score"] == 1.0
    with session_scope(sandbox) as session:
        rows = [repository.find_trajectory(session, t.id, 0, 7) for t in repository.tasks_by_keys(session, keys)]
        assert all(r is not None and r.purpose == "eval" and r.n_steps == len(r.steps) > 0 for r in rows)


def test_storage_state_is_read_from_the_artifacts_store_only(client, pool_settings, fixture_url, make_task,
                                                               tmp_path):
    """A storage_state outside the artifacts store is a 422 naming it, whether it exists (a valid login file
    elsewhere is not loaded) or not (no file-existence oracle); no browser is used."""
    elsewhere = tmp_path / "state.json"
    elsewhere.write_text('{"cookies": [], "origins": []}')
    escape = "../" * 12 + str(elsewhere).lstrip("/")
    for path in (str(elsewhere), escape, "/etc/passwd", "/nonexistent/state.json", "../state.json"):
        reply = client.post("/v1/episodes", json={"task": make_task(f"{fixture_url}/next.html",
                                                                    storage_state=path).to_json()})
        assert reply.status_code == 422, (path, reply.text)
        error = reply.json()["error"]
        assert error["fields"][0]["field"] == "task.storage_state", path
        assert "outside the artifacts store" in error["message"], path
    inside = client.post("/v1/episodes", json={"task": make_task(f"{fixture_url}/next.html",
                                                                 storage_state="./.auth/none.json").to_json()})
    assert inside.status_code == 200, inside.text  # inside the store and absent: the sandbox login, as before
    client.delete(f"/v1/episodes/{inside.json()['episode_id']}")


@pytest.mark.parametrize("path", ["./.auth/folder", "./.auth/folder/"])
def test_a_folder_as_storage_state_is_a_422_naming_it(client, pool_settings, fixture_url, make_task, path):
    """A folder in the store is no login file: refused like a malformed one, not opened without a login."""
    (pool_settings.artifacts_dir / ".auth" / "folder").mkdir(parents=True, exist_ok=True)
    task = make_task(f"{fixture_url}/next.html", storage_state=path).to_json()
    reply = client.post("/v1/episodes", json={"task": task})
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["fields"][0]["field"] == "task.storage_state"


def test_an_abandoned_episode_expires_and_frees_its_browser(pool_settings, fixture_url, make_task):
    """Pool of one: a client opens an episode and goes away; after the idle limit the next client gets the
    browser (it used to wait, then 503), and the abandoned id answers 404 saying it expired."""
    settings = pool_settings.replace(browser={"pool_size": 1, "episode_idle_s": 1.0})
    task = {"task": make_task(f"{fixture_url}/next.html").to_json()}
    with TestClient(create_app_for_service(settings)) as client:
        abandoned = client.post("/v1/episodes", json=task)
        assert abandoned.status_code == 200, abandoned.text
        second = client.post("/v1/episodes", json=task)
        assert second.status_code == 200, second.text
        gone = client.post(f"/v1/episodes/{abandoned.json()['episode_id']}/step",
                           json={"action": 'do(action="Scroll Down")'})
        assert gone.status_code == 404 and "expired" in gone.json()["error"]["message"]
        assert "WEBRL_BROWSER__EPISODE_IDLE_S" in gone.json()["error"]["message"]
        live = second.json()["episode_id"]
        for _ in range(3):  # an episode in use is not reaped
            stepped = client.post(f"/v1/episodes/{live}/step", json={"action": 'do(action="Scroll Down")'})
            assert stepped.status_code == 200, stepped.text
        assert client.delete(f"/v1/episodes/{live}").status_code == 200


def test_a_delete_during_a_step_closes_the_episode_once_the_step_ended(pool_settings, fixture_url, make_task,
                                                                        monkeypatch):
    """The browser went back to the pool while a step still drove it (the next episode could be handed a page the
    old step acted on): a delete now waits for the step, which ends on its own page."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from services.browser_pool.episode import BrowserEpisode

    real_step, real_close, stepping, events = BrowserEpisode.step, BrowserEpisode.close, threading.Event(), []

    async def slow_step(self, text):
        stepping.set()
        await asyncio.sleep(1.0)
        try:
            return await real_step(self, text)
        finally:
            events.append("step ended")

    async def close(self):
        events.append("closed")
        await real_close(self)

    monkeypatch.setattr(BrowserEpisode, "step", slow_step)
    monkeypatch.setattr(BrowserEpisode, "close", close)
    settings = pool_settings.replace(browser={"pool_size": 1})
    task = {"task": make_task(f"{fixture_url}/next.html").to_json()}
    with TestClient(create_app_for_service(settings)) as client, ThreadPoolExecutor(1) as other_client:
        episode_id = client.post("/v1/episodes", json=task).json()["episode_id"]
        step = other_client.submit(client.post, f"/v1/episodes/{episode_id}/step",
                                   json={"action": 'do(action="Scroll Down")'})
        assert stepping.wait(30)
        assert client.delete(f"/v1/episodes/{episode_id}").json() == {"deleted": episode_id}
        assert events == ["step ended", "closed"]
        stepped = step.result(timeout=60)
        assert stepped.status_code == 200 and stepped.json()["error"] is None, stepped.text
        assert client.post(f"/v1/episodes/{episode_id}/step", json={"action": "exit()"}).status_code == 404
        after = client.post("/v1/episodes", json=task)  # the one browser is free again
        assert after.status_code == 200, after.text
        assert client.delete(f"/v1/episodes/{after.json()['episode_id']}").status_code == 200


async def test_two_reapers_at_once_close_each_idle_episode_once(pool_settings, fixture_url, make_task) -> None:
    """The idle reaper and a new episode's reap ran together: the second popped an episode the first had closed
    (a KeyError: the new episode's request answered 500)."""
    from services.browser_pool.pool import BrowserPool
    from services.browser_pool.sessions import EpisodeManager
    from webrl.agent.schemas import TaskConfig

    settings = pool_settings.replace(browser={"pool_size": 2, "episode_idle_s": 60.0})
    manager = EpisodeManager(settings, BrowserPool(settings, settings.browser.pool_size))
    try:
        task = TaskConfig.from_json(make_task(f"{fixture_url}/next.html").to_json())
        opened = {(await manager.create(task)).id for _ in range(2)}
        for live in manager._episodes.values():  # both left a minute ago (the background reaper looks every 15 s)
            live.last_used -= 61
        first, second = await asyncio.gather(manager.reap_idle(), manager.reap_idle())
        assert sorted(first + second) == sorted(opened) and not manager._episodes
    finally:
        await manager.close()


def test_an_evaluation_that_never_settles_is_a_504_and_frees_its_browser(pool_settings, fixture_url, make_task,
                                                                         monkeypatch):
    """Pool of one: an evaluation that never returns (a page promise that never resolves) held the episode's lock,
    which kept the idle reaper off its browser for good; it now ends at the step limit and the browser is free."""
    import asyncio

    from services.browser_pool.episode import BrowserEpisode

    async def never(self, answer):
        await asyncio.Event().wait()

    monkeypatch.setattr(BrowserEpisode, "evaluate", never)
    settings = pool_settings.replace(browser={"pool_size": 1, "step_timeout_s": 6.0})
    task = {"task": make_task(f"{fixture_url}/next.html").to_json()}
    with TestClient(create_app_for_service(settings)) as client:
        stuck = client.post("/v1/episodes", json=task).json()["episode_id"]
        reply = client.post(f"/v1/episodes/{stuck}/evaluate", json={"answer": None})
        assert reply.status_code == 504 and "WEBRL_BROWSER__STEP_TIMEOUT_S" in reply.text, reply.text
        assert client.post(f"/v1/episodes/{stuck}/step", json={"action": "exit()"}).status_code == 404
        after = client.post("/v1/episodes", json=task)  # the one browser is free again
        assert after.status_code == 200, after.text
        assert client.delete(f"/v1/episodes/{after.json()['episode_id']}").status_code == 200


@pytest.mark.parametrize(("geolocation", "field"), [
    ({"latitude": 1e9, "longitude": 0}, "task.geolocation.latitude"),  # Playwright's precondition: [-90, 90]
    ({"latitude": 0, "longitude": -181}, "task.geolocation.longitude"),
    ({"latitude": 1e9}, "task.geolocation.latitude"),
    ({"latitude": 1, "longitude": 1, "accuracy": -1}, "task.geolocation.accuracy"),
    ("here", "task.geolocation"),
])
def test_a_geolocation_out_of_range_is_a_422_naming_it(client, fixture_url, make_task, geolocation, field):
    task = {**make_task(f"{fixture_url}/next.html").to_json(), "geolocation": geolocation}
    reply = client.post("/v1/episodes", json={"task": task})
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["fields"][0]["field"] == field


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "Invalid JSON"),
    ("[]", "Input should be an object"),
    ('{"cookies": [{"name": "a", "value": "b", "domain": "127.0.0.1", "path": "/", "expires": "soon"}]}',
     "cookies.0.expires: Input should be a valid number"),
    ('{"cookies": [{"name": "a", "value": "b"}]}', "a cookie needs url, or domain and path"),
    ('{"cookies": [], "origins": [{"origin": "http://127.0.0.1", "localStorage": "x"}]}',
     "origins.0.localStorage: Input should be a valid array"),
])
def test_a_login_file_in_the_store_that_is_no_storage_state_is_a_422_naming_it(client, pool_settings, fixture_url,
                                                                                make_task, content, problem):
    """The file is read and checked before a browser is used: Playwright never gets a malformed one."""
    state = pool_settings.artifacts_dir / ".auth" / "malformed.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(content)
    task = make_task(f"{fixture_url}/next.html", storage_state="./.auth/malformed.json").to_json()
    reply = client.post("/v1/episodes", json={"task": task})
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["fields"][0]["field"] == "task.storage_state" and problem in error["message"], error
    assert "not a Playwright storage state" in error["message"]
