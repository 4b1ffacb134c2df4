"""The ORM service over HTTP: inline and stored trajectories, stored labels, idempotence, bad requests."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from services.orm.app import create_orm_app
from services.orm.scoring import LocalOrm
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.models.orm import orm_probabilities
from webrl.prompts.orm_prompt import build_orm_prompt


@pytest.fixture
def orm(tiny_orm_dir, db_settings) -> LocalOrm:
    return LocalOrm(tiny_orm_dir, db_settings)


@pytest.fixture
def client(orm, db_settings) -> TestClient:
    return TestClient(create_orm_app(db_settings, backend=orm))


def test_inline_trajectories_get_p_from_the_model(client, orm, make_trajectory) -> None:
    trajs = [make_trajectory(i) for i in range(3)]
    resp = client.post("/v1/orm/score", json={"trajectories": [t.model_dump(mode="json") for t in trajs],
                                              "threshold": 0.5})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    expected = orm_probabilities(orm.model, orm.tokenizer, [build_orm_prompt(orm.tokenizer, t) for t in trajs])
    assert [r["p"] for r in body["results"]] == pytest.approx(expected, abs=1e-5)
    assert [r["reward"] for r in body["results"]] == [1.0 if p >= 0.5 else 0.0 for p in expected]
    assert body["orm_version"] == orm.version and body["threshold"] == 0.5


def test_stored_trajectories_are_labelled_once(client, db_settings, make_trajectory, store) -> None:
    ids = store(db_settings, [make_trajectory(i) for i in range(4)])
    first = client.post("/v1/orm/score", json={"trajectory_ids": ids}).json()
    again = client.post("/v1/orm/score", json={"trajectory_ids": ids}).json()
    assert [r["trajectory_id"] for r in first["results"]] == ids
    assert first["results"] == again["results"]
    with session_scope(db_settings) as session:
        labels = session.scalars(select(m.OrmLabel).order_by(m.OrmLabel.trajectory_id)).all()
        assert [lab.trajectory_id for lab in labels] == ids
        assert [lab.p_yes for lab in labels] == pytest.approx([r["p"] for r in first["results"]])
        assert session.scalar(select(func.count(m.OrmLabel.id))) == 4


def test_a_higher_threshold_flips_rewards(client, make_trajectory) -> None:
    payload = {"trajectories": [make_trajectory(0).model_dump(mode="json")]}
    p = client.post("/v1/orm/score", json=payload).json()["results"][0]["p"]
    low = client.post("/v1/orm/score", json={**payload, "threshold": max(0.0, p - 0.01)}).json()
    high = client.post("/v1/orm/score", json={**payload, "threshold": min(1.0, p + 0.01)}).json()
    assert low["results"][0]["reward"] == 1.0 and high["results"][0]["reward"] == 0.0


@pytest.mark.parametrize(("body", "field"), [
    ({}, "give exactly one"),
    ({"trajectory_ids": []}, "trajectory_ids"),
    ({"trajectory_ids": [1], "treshold": 0.4}, "treshold"),
    ({"trajectory_ids": [1], "trajectories": [{"task_id": "t", "intent": "x"}]}, "give exactly one"),
    ({"trajectory_ids": [1], "threshold": 1.5}, "threshold"),
    ({"trajectory_ids": ["one"]}, "trajectory_ids.0"),
    ({"trajectories": [{"task_id": "t"}]}, "trajectories.0.intent"),
    ({"phase": 1, "purpose": "trian"}, "purpose"),  # not an empty selection scored as mean reward 0
])
def test_bad_requests_get_422_naming_the_problem(client, body, field) -> None:
    resp = client.post("/v1/orm/score", json=body)
    assert resp.status_code == 422
    assert field in resp.json()["error"]["message"]


def test_unknown_ids_get_404(client) -> None:
    resp = client.post("/v1/orm/score", json={"trajectory_ids": [987654]})
    assert resp.status_code == 404 and "987654" in resp.json()["error"]["message"]


def test_an_unconfigured_orm_answers_503(db_settings, make_trajectory) -> None:
    client = TestClient(create_orm_app(db_settings))  # no WEBRL_ORM__MODEL, no backend
    resp = client.post("/v1/orm/score", json={"trajectories": [make_trajectory(0).model_dump(mode="json")]})
    assert resp.status_code == 503 and "WEBRL_ORM__MODEL" in resp.json()["error"]["message"]


def test_an_orm_folder_that_holds_no_model_is_a_422_naming_it(db_settings, make_trajectory) -> None:
    """A folder a request may name (inside the artifacts store) that is not a model: refused before loading, which
    would fail as a 500."""
    folder = db_settings.artifacts_dir / "models"
    folder.mkdir(parents=True, exist_ok=True)
    client = TestClient(create_orm_app(db_settings))
    resp = client.post("/v1/orm/score", json={"trajectories": [make_trajectory(0).model_dump(mode="json")],
                                              "orm": str(folder)})
    assert resp.status_code == 422, resp.text
    assert "orm" in resp.json()["error"]["message"] and "not a model folder" in resp.json()["error"]["message"]


def test_rest_route_and_celery_task_label_a_phase_alike(tiny_orm_dir, db_settings, make_trajectory, store) -> None:
    from webrl.wire.clients import orm_score
    from webrl.wire.contracts import ScoreRequest

    ids = store(db_settings, [make_trajectory(i) for i in range(2)], phase=4)
    request = ScoreRequest(phase=4, orm=str(tiny_orm_dir), threshold=0.5)
    client = TestClient(create_orm_app(db_settings))  # loads the request's ORM, as the worker does
    by_route = client.post("/v1/orm/score", json=request.model_dump(mode="json"))
    assert by_route.status_code == 200, by_route.text
    with session_scope(db_settings) as session:
        assert sorted(session.scalars(select(m.OrmLabel.trajectory_id))) == ids  # the route stores labels
    by_task = orm_score(request)  # typed client -> eager Celery task: finds the labels, stores nothing twice
    assert by_task.model_dump(mode="json") == by_route.json()
    with session_scope(db_settings) as session:
        assert session.scalar(select(func.count()).select_from(m.OrmLabel)) == 2


def test_an_orm_republished_in_place_is_loaded_again_by_route_and_task(tiny_orm_dir, db_settings,
                                                                       make_trajectory) -> None:
    """``webrl train-orm`` publishes into the same folder: a running service must judge with the new model and
    label with its version, not answer for it with the one it loaded before."""
    import shutil

    from webrl.store.checkpoints import publish_folder
    from webrl.wire.clients import orm_score
    from webrl.wire.contracts import ScoreRequest

    folder = db_settings.artifacts_dir / "models" / "orm"

    def publish(version: str) -> None:
        publish_folder(lambda tmp: shutil.copytree(tiny_orm_dir, tmp, dirs_exist_ok=True), folder, role="orm",
                       version=version, replace=True)

    request = ScoreRequest(trajectories=[make_trajectory(0)], orm=str(folder), threshold=0.5)
    client = TestClient(create_orm_app(db_settings))
    for version in ("orm-a", "orm-b"):
        publish(version)
        by_route = client.post("/v1/orm/score", json=request.model_dump(mode="json"))
        assert by_route.status_code == 200 and by_route.json()["orm_version"] == version, by_route.text
        assert orm_score(request).orm_version == version  # the worker's cache too
    assert len(client.app.state.orm.backends) == 1  # the first publication's model is let go


def test_a_trajectory_over_the_step_cap_is_a_422_naming_it(client, make_trajectory) -> None:
    from webrl.wire.contracts import MAX_EPISODE_STEPS

    long = make_trajectory(1)
    long.steps = [long.steps[0].model_copy(update={"index": i}) for i in range(MAX_EPISODE_STEPS + 1)]
    trajs = [make_trajectory(0).model_dump(mode="json"), long.model_dump(mode="json")]
    resp = client.post("/v1/orm/score", json={"trajectories": trajs})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["fields"][0]["field"] == "trajectories.1"
    assert f"at most {MAX_EPISODE_STEPS} steps" in resp.json()["error"]["message"]
