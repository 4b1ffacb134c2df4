"""The trainer writes (and replaces) checkpoints inside the artifacts store only: an output path anywhere else
is a 422 naming the field over REST and an InvalidRequest over Celery, and nothing outside is touched."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.trainer.app import create_trainer_app
from webrl.checkpoints import list_checkpoints
from webrl.contracts import InvalidRequest
from webrl.db.session import session_scope


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A folder outside the store with a file in it: what a request must not delete or replace."""
    folder = tmp_path / "victim"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    return folder


def _outside_values(db, victim: Path) -> list[str]:
    depth = len(Path(db.artifacts_dir).resolve().parts)
    return [str(victim), "../" * depth + str(victim).lstrip("/"), "../victim", "models/../../../victim"]


def test_rest_refuses_outputs_outside_the_store(db, tiny_dir: Path, victim: Path) -> None:
    client = TestClient(create_trainer_app(db))
    for value in _outside_values(db, victim):
        sft = client.post("/v1/train/sft", json={"base": str(tiny_dir), "output": value, "trajectory_ids": [1]})
        assert sft.status_code == 422, (value, sft.text)
        assert sft.json()["error"]["fields"][0]["field"] == "output"
        assert "outside the artifacts store" in sft.json()["error"]["message"]
        for field in ("actor_output", "critic_output"):
            phase = client.post("/v1/train", json={"phase": 1, "actor": str(tiny_dir), field: value})
            assert phase.status_code == 422, (field, value, phase.text)
            assert phase.json()["error"]["fields"][0]["field"] == field
    assert (victim / "keep.txt").read_text() == "precious" and sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    with session_scope(db) as session:
        assert list_checkpoints(session) == []


def test_celery_tasks_refuse_outputs_outside_the_store(db, tiny_dir: Path, store_trajectory, victim: Path) -> None:
    from webrl.queue import configure, dispatch

    configure(db)
    ids = [store_trajectory("s1", 0, 0, ['exit(message="done")'], reward=None, env_score=1.0, purpose="sft")]
    for value in _outside_values(db, victim):
        with pytest.raises(InvalidRequest, match=r"^output: .*outside the artifacts store"):
            dispatch("train.sft", {"base": str(tiny_dir), "output": value, "trajectory_ids": ids, "lr": 1e-3,
                                   "max_length": 300})
        with pytest.raises(InvalidRequest, match=r"^actor_output: "):
            dispatch("train.phase", {"phase": 1, "actor": str(tiny_dir), "actor_output": value})
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    with session_scope(db) as session:
        assert list_checkpoints(session) == []
