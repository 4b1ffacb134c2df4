"""The ``actor.act`` Celery task, run eagerly through ``webrl.queue.dispatch``."""

from __future__ import annotations

from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.queue import dispatch


def test_actor_act_task(actor_model_dir: Path, settings: Settings) -> None:
    item = {"intent": "Show me Electronics", "observation": {"html": '<a id="3"> Electronics </a>', "url": "u"}}
    result = dispatch("actor.act", {"model": str(actor_model_dir), "batch": [item, item], "max_new_tokens": 6})
    assert result["version"] == "actor-v1" and len(result["results"]) == 2
    assert result["results"][0]["token_ids"] == result["results"][1]["token_ids"]
    with pytest.raises(ValueError, match="needs a model"):
        dispatch("actor.act", {"batch": [item]})
