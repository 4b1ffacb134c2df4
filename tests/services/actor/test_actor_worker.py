"""The ``actor.act`` Celery task, run eagerly through ``webrl.wire.queue.dispatch``."""

from __future__ import annotations

from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.wire.queue import dispatch


def test_actor_act_task(actor_model_dir: Path, settings: Settings) -> None:
    item = {"intent": "Show me Electronics", "observation": {"html": '<a id="3"> Electronics </a>', "url": "u"}}
    result = dispatch("actor.act", {"model": str(actor_model_dir), "batch": [item, item], "max_new_tokens": 6})
    assert result["version"] == "actor-v1" and len(result["results"]) == 2
    assert result["results"][0]["token_ids"] == result["results"][1]["token_ids"]
    with pytest.raises(ValueError, match="needs a model"):
        dispatch("actor.act", {"batch": [item]})
    for folder in ("/etc", "/nonexistent-webrl"):  # loading runs a folder's code: never one a request may not name
        with pytest.raises(ValueError, match=r"^model: .*outside the artifacts store"):
            dispatch("actor.act", {"model": folder, "batch": [item]})


def test_typed_client_gives_what_the_act_route_gives(actor_model_dir: Path, settings: Settings) -> None:
    from fastapi.testclient import TestClient

    from services.actor.app import create_actor_app
    from webrl.agent.schemas import Observation
    from webrl.wire.clients import actor_act
    from webrl.wire.contracts import ActItem, ActJob

    item = ActItem(intent="Show me Electronics", observation=Observation(html='<a id="3"> Electronics </a>', url="u"))
    job = ActJob(model=str(actor_model_dir), batch=[item], max_new_tokens=6)
    by_task = actor_act(job)
    live = settings.replace(actor={"model": str(actor_model_dir)})
    with TestClient(create_actor_app(live)) as client:
        by_route = client.post("/v1/act", json=job.model_dump(mode="json", exclude={"model"}))
        assert by_route.status_code == 200, by_route.text
        assert by_route.json()["results"][0]["token_ids"] == by_task.results[0].token_ids
        typo = client.post("/v1/act", json={"batch": [item.model_dump(mode="json")], "temprature": 0.5})
        assert typo.status_code == 422 and "temprature" in typo.json()["error"]["message"]
