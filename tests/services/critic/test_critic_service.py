"""The critic service: V = min of two heads over HTTP, the ``critic.value`` task (the same operation, with the
same side effects), bad requests."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy import select

from services.critic.app import create_critic_app
from services.critic.values import CriticScorer, MissingStartPageError, State
from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.db import models as m
from webrl.db.repository import save_trajectory, upsert_task
from webrl.db.session import session_scope
from webrl.models.critic import encode_states
from webrl.serving.paths import SHIPPED_MODELS
from webrl.wire.clients import critic_value
from webrl.wire.contracts import CriticState, StartState, ValueRequest
from webrl.wire.queue import dispatch

STATES = [State("Add the blue kettle to the cart", '<div id="5">kettle</div>'),
          State("Find the price of the kettle", '<div id="5">kettle</div><p>$12</p>',
                ('do(action="Click", element="5")',))]


@pytest.fixture
def scorer(tiny_critic_dir, db_settings) -> CriticScorer:
    return CriticScorer(tiny_critic_dir, db_settings)


@pytest.fixture
def client(scorer, db_settings) -> TestClient:
    return TestClient(create_critic_app(db_settings, scorer=scorer))


def test_value_is_the_min_of_the_two_heads(client, scorer) -> None:
    body = {"states": [{"intent": s.intent, "observation": s.observation, "history": list(s.history)} for s in STATES]}
    resp = client.post("/v1/critic/value", json=body)
    assert resp.status_code == 200, resp.text
    ids, mask = encode_states(scorer.tokenizer, scorer.prompts(STATES))
    with torch.no_grad():
        heads = torch.softmax(scorer.model.head_logits(ids, mask), dim=-1)[..., 1]  # (2, B)
    assert resp.json()["values"] == pytest.approx(torch.minimum(heads[0], heads[1]).tolist(), abs=1e-5)
    assert resp.json()["critic_version"] == scorer.version


@pytest.mark.parametrize(("body", "field"), [
    ({"states": []}, "states"),
    ({}, "states"),
    ({"states": [{"observation": "<p/>"}]}, "states.0.intent"),
    ({"states": [{"intent": "", "observation": "<p/>"}]}, "states.0.intent"),
    ({"states": [{"intent": "x", "observation": "<p/>", "history": "not a list"}]}, "states.0.history"),
    ({"states": [{"intent": "x", "observation": "<p/>"}], "critc": "/typo"}, "critc"),
    ({"states": [{"intent": "x", "observation": "<p/>", "histroy": []}]}, "states.0.histroy"),
    ({"task_keys": ["no/such/task"]}, "task_keys"),
    ({"states": [{"intent": "x", "observation": "<p/>", "history": ["do(action=\"Scroll Down\")"] * 101}]},
     "states.0.history"),  # MAX_EPISODE_STEPS: a longer history held the critic for minutes
])
def test_bad_requests_get_422(client, body, field) -> None:
    resp = client.post("/v1/critic/value", json=body)
    assert resp.status_code == 422
    assert field in resp.json()["error"]["message"]


def test_a_folder_that_is_not_a_saved_critic_gets_422(client) -> None:
    """The shipped actor's folder is an allowed model folder but holds no critic heads: a bad field, not a 500."""
    actor = SHIPPED_MODELS / "actor-sft-smollm2"
    body = {"states": [{"intent": "x", "observation": "<p/>"}], "critic": str(actor)}
    resp = client.post("/v1/critic/value", json=body)
    assert resp.status_code == 422, resp.text
    assert "critic" in resp.json()["error"]["message"] and "not a saved critic" in resp.json()["error"]["message"]


def _store_task(settings, key: str, site: str, with_episode: bool) -> None:
    config = TaskConfig(task_id=key, sites=[site], intent=f"Do {key}", start_url=f"__{site.upper()}__/")
    with session_scope(settings) as session:
        task = upsert_task(session, key, config, origin="generated", split="train")
        if with_episode:
            step = Step(index=0, observation=Observation(html='<div id="5">kettle</div>', url="http://s/"),
                        response='exit(message="x")')
            save_trajectory(session, task.id, 0, 0, Trajectory(task_id=key, intent=config.intent, steps=[step]))


def test_critic_value_task_uses_stored_start_pages_and_stores_values(tiny_critic_dir, db_settings, scorer) -> None:
    _store_task(db_settings, "seen", "shopping", with_episode=True)
    _store_task(db_settings, "new", "shopping", with_episode=False)  # same site: the stored page stands in
    result = dispatch("critic.value", {"task_keys": ["seen", "new"], "critic": str(tiny_critic_dir)})
    page = '<div id="5">kettle</div>'
    expected = scorer.values([State("Do seen", page), State("Do new", page)])
    assert result["values"] == pytest.approx(expected, abs=1e-5)
    assert result["by_key"]["new"] == pytest.approx(expected[1], abs=1e-5)
    with session_scope(db_settings) as session:
        assert len(session.scalars(select(m.CriticValue)).all()) == 2
    dispatch("critic.value", {"task_keys": ["seen", "new"], "critic": str(tiny_critic_dir)})  # idempotent
    with session_scope(db_settings) as session:
        assert len(session.scalars(select(m.CriticValue)).all()) == 2


def test_critic_value_task_names_tasks_without_a_start_page(tiny_critic_dir, db_settings) -> None:
    _store_task(db_settings, "lonely", "gitlab", with_episode=False)
    with pytest.raises(MissingStartPageError, match="lonely"):
        dispatch("critic.value", {"task_keys": ["lonely"], "critic": str(tiny_critic_dir)})
    result = dispatch("critic.value", {"task_keys": ["lonely"], "critic": str(tiny_critic_dir),
                                       "observations": {"lonely": "<p>gitlab</p>"}})
    assert 0.0 < result["by_key"]["lonely"] < 1.0


def test_critic_value_task_takes_keyed_states_as_the_pipeline_sends_them(tiny_critic_dir, db_settings, scorer) -> None:
    _store_task(db_settings, "observed", "reddit", with_episode=False)
    items = [{"key": "observed", "intent": "Do observed", "observation": "<p>forum</p>"},
             {"key": "not-stored", "intent": "Something else", "observation": "<p>other</p>"}]
    result = dispatch("critic.value", {"critic": str(tiny_critic_dir), "states": items})
    expected = scorer.values([State("Do observed", "<p>forum</p>"), State("Something else", "<p>other</p>")])
    assert result["values"] == pytest.approx(expected, abs=1e-5)
    with session_scope(db_settings) as session:
        assert len(session.scalars(select(m.CriticValue)).all()) == 1  # only stored tasks keep a value
    with pytest.raises(ValueError, match="exactly one of states or task_keys"):
        dispatch("critic.value", {"critic": str(tiny_critic_dir)})
    with pytest.raises(ValueError, match="items"):
        dispatch("critic.value", {"critic": str(tiny_critic_dir), "items": items})  # the old name: not a field


def test_an_unconfigured_critic_answers_503(db_settings) -> None:
    client = TestClient(create_critic_app(db_settings))
    resp = client.post("/v1/critic/value", json={"states": [{"intent": "x", "observation": "<p/>"}]})
    assert resp.status_code == 503 and "WEBRL_CRITIC__MODEL" in resp.json()["error"]["message"]


def test_rest_route_and_celery_task_give_the_same_values_and_store_them(client, tiny_critic_dir, db_settings,
                                                                        scorer) -> None:
    _store_task(db_settings, "seen", "shopping", with_episode=True)
    _store_task(db_settings, "new", "shopping", with_episode=False)
    request = ValueRequest(task_keys=["seen", "new"], critic=str(tiny_critic_dir))
    resp = client.post("/v1/critic/value", json=request.model_dump(mode="json"))
    assert resp.status_code == 200, resp.text
    with session_scope(db_settings) as session:
        assert len(session.scalars(select(m.CriticValue)).all()) == 2  # the route stores, as the task does
    by_task = critic_value(request)  # typed client -> eager Celery task
    by_route = resp.json()
    assert by_task.critic_version == by_route["critic_version"]
    assert by_task.values == pytest.approx(by_route["values"], abs=1e-6)
    assert by_task.by_key == pytest.approx(by_route["by_key"], abs=1e-6)
    with session_scope(db_settings) as session:
        assert len(session.scalars(select(m.CriticValue)).all()) == 2


def test_typed_client_round_trips_keyed_start_states(tiny_critic_dir, db_settings, scorer) -> None:
    _store_task(db_settings, "observed", "reddit", with_episode=False)
    start = StartState(key="observed", intent="Do observed", observation="<p>forum</p>")
    result = critic_value(ValueRequest(states=[CriticState.of(start)], critic=str(tiny_critic_dir)))
    assert result.by_key == {"observed": pytest.approx(scorer.values([State("Do observed", "<p>forum</p>")])[0],
                                                       abs=1e-5)}


def test_a_critic_republished_in_place_is_loaded_again_by_route_and_task(tiny_critic_dir, db_settings) -> None:
    """A critic folder written anew (a configured ``WEBRL_CRITIC__MODEL`` retrained, a phase with a fixed
    ``critic_output``): a running service values with the new critic under its version, not with the one it loaded
    before (the ORM and actor caches already keyed on the publication)."""
    import shutil

    from webrl.store.checkpoints import publish_folder

    folder = db_settings.artifacts_dir / "models" / "critic"
    request = ValueRequest(states=[CriticState(intent="Find the kettle", observation="<p>kettle</p>")],
                           critic=str(folder))
    client = TestClient(create_critic_app(db_settings))
    for version in ("critic-a", "critic-b"):
        publish_folder(lambda tmp: shutil.copytree(tiny_critic_dir, tmp, dirs_exist_ok=True), folder, role="critic",
                       version=version, replace=True)
        by_route = client.post("/v1/critic/value", json=request.model_dump(mode="json"))
        assert by_route.status_code == 200 and by_route.json()["critic_version"] == version, by_route.text
        assert critic_value(request).critic_version == version  # the worker's cache too
    assert len(client.app.state.critic.scorers) == 1  # the first publication's critic is let go
