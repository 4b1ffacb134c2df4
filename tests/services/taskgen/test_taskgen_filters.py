"""De-duplication, the critic-value filter and the REST contract of the taskgen service."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from services.taskgen.curriculum import filter_by_value
from services.taskgen.dedup import NEAR_DUPLICATE_JACCARD, Deduplicator, jaccard, trigrams
from services.taskgen.llm import parse_generated, validate_intent
from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope


def _config(i: int, intent: str) -> TaskConfig:
    return TaskConfig.from_json({"task_id": i, "sites": ["shopping"], "intent": intent, "start_url": "__SHOPPING__"})


@pytest.fixture
def db(settings: Settings) -> Settings:
    upgrade(settings)
    with session_scope(settings) as s:
        for i, v in enumerate([0.0, 0.04, 0.05, 0.3, 0.75, 0.76, 1.0]):
            repo.upsert_task(s, f"t{i}", _config(i, f"task number {i} with value {v}"), origin="generated",
                             split="train", phase=1)
    return settings


def test_exact_and_near_duplicates_are_refused() -> None:
    dedup = Deduplicator(["What is the price of the Blue Ceramic Mug?"])
    assert dedup.duplicate_of("what is the price of the blue ceramic mug") == "exact"
    assert dedup.duplicate_of("What's the price of the Blue Ceramic Mug?") == "near"
    assert dedup.duplicate_of("What is the price of the Walnut Desk Lamp?") is None
    assert dedup.admit("What is the price of the Walnut Desk Lamp?")
    assert not dedup.admit("What is the price of the walnut desk lamp")


def test_different_entities_stay_below_the_near_duplicate_threshold() -> None:
    a = trigrams("Show me the reviews of Blue Ceramic Mug")
    b = trigrams("Show me the reviews of Oak Bookshelf")
    assert jaccard(a, b) < NEAR_DUPLICATE_JACCARD
    assert jaccard(a, a) == 1.0


def test_the_value_filter_keeps_exactly_the_in_range_tasks(db: Settings) -> None:
    keys = [f"t{i}" for i in range(7)]
    values = dict(zip(keys, [0.0, 0.04, 0.05, 0.3, 0.75, 0.76, 1.0], strict=True))
    kept = filter_by_value(db, keys, values, critic_version="critic-p1")
    assert kept == ["t2", "t3", "t4"]  # [0.05, 0.75], both ends included
    assert filter_by_value(db, keys, values, critic_version="critic-p1", low=0.0, high=0.04) == ["t0", "t1"]
    with session_scope(db) as s:  # values stored once per (task, critic version), even after two calls
        assert len(s.scalars(select(m.CriticValue)).all()) == 7


def test_the_filter_refuses_bad_ranges_and_unknown_tasks(db: Settings) -> None:
    with pytest.raises(ValueError, match="low <= high"):
        filter_by_value(db, ["t1"], {"t1": 0.5}, critic_version="c", low=0.8, high=0.2)
    with pytest.raises(KeyError, match="nope"):
        filter_by_value(db, ["nope"], {"nope": 0.5}, critic_version="c")


def test_llm_output_parsing_keeps_tasks_and_rejects_junk() -> None:
    answer = ("Here you go:\n- `Find the cheapest red mug in the Kitchen category`\n- `Click`\n"
              "- `Open the given task list`\n- `do(action=\"Click\", element=\"3\")`\n"
              "- `List the three most recent orders of Emma Lopez`")
    good, bad = parse_generated("shopping", answer)
    assert good == ["Find the cheapest red mug in the Kitchen category",
                    "List the three most recent orders of Emma Lopez"]
    assert [r.text for r in bad] == ["Click", "Open the given task list", 'do(action="Click", element="3")']
    assert validate_intent("Show me my last order") is None
    assert parse_generated("shopping", "no tasks here")[1][0].reason == "no backticked task in the answer"


def test_rest_filter_and_validation(db: Settings) -> None:
    from services.taskgen.app import app

    client = TestClient(app)
    ok = client.post("/v1/tasks/filter", json={"task_keys": ["t2", "t6"], "values": {"t2": 0.05, "t6": 1.0},
                                               "critic_version": "c-rest"})
    assert ok.status_code == 200 and ok.json() == {"kept": ["t2"]}
    bad = client.post("/v1/tasks/filter", json={"task_keys": ["t2"], "values": {}, "critic_version": "c"})
    assert bad.status_code == 422 and "values lacks task keys" in bad.json()["error"]["message"]
    unknown = client.post("/v1/tasks/filter", json={"task_keys": ["zz"], "values": {"zz": 0.5},
                                                    "critic_version": "c"})
    assert unknown.status_code == 422 and "task_keys" in unknown.json()["error"]["message"]
    llm = client.post("/v1/tasks/generate", json={"phase": 1, "parent_keys": ["t1"], "n": 3, "generator": "llm"})
    assert llm.status_code == 422 and "endpoint and model" in llm.json()["error"]["message"]
    from webrl.wire.queue import dispatch

    anywhere = client.post("/v1/tasks/generate", json={"phase": 1, "parent_keys": ["t1"], "n": 3, "generator": "llm",
                                                        "endpoint": "http://127.0.0.1:1/v1", "model": "m"})
    error = anywhere.json()["error"]
    assert anywhere.status_code == 422 and error["fields"][0]["field"] == "endpoint"
    assert "not a configured endpoint" in error["message"]
    with pytest.raises(ValueError, match="not a configured endpoint"):  # the Celery path runs the same op
        dispatch("taskgen.generate", {"phase": 1, "parent_keys": ["t1"], "n": 3, "generator": "llm",
                                      "endpoint": "http://127.0.0.1:1/v1", "model": "m"})


def test_rest_route_and_celery_task_filter_and_store_alike(db: Settings) -> None:
    from services.taskgen.app import app
    from webrl.wire.clients import taskgen_filter
    from webrl.wire.contracts import FilterRequest

    request = FilterRequest(task_keys=["t1", "t3"], values={"t1": 0.04, "t3": 0.3}, critic_version="c-both")
    by_route = TestClient(app).post("/v1/tasks/filter", json=request.model_dump(mode="json"))
    assert by_route.status_code == 200 and by_route.json() == {"kept": ["t3"]}
    assert taskgen_filter(request).kept == ["t3"]  # typed client -> eager Celery task
    with session_scope(db) as s:  # each stored both values once, under the one critic version
        rows = s.scalars(select(m.CriticValue).where(m.CriticValue.critic_version == "c-both")).all()
        assert sorted(r.value for r in rows) == [0.04, 0.3]


def test_a_misspelt_field_is_rejected_by_name(db: Settings) -> None:
    from services.taskgen.app import app
    from webrl.wire.queue import dispatch

    body = {"task_keys": ["t1"], "values": {"t1": 0.5}, "critic_version": "c", "hihg": 0.9}
    resp = TestClient(app).post("/v1/tasks/filter", json=body)
    assert resp.status_code == 422 and "hihg" in resp.json()["error"]["message"]
    with pytest.raises(ValueError, match="hihg"):
        dispatch("taskgen.filter", body)
