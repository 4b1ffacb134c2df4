"""A folder's checkpoint version fits the database's version columns (String(80)): a folder name (or a declared
version) longer than that is bounded to its start and a digest of the whole, so every insert that stores it
(``trajectories.actor_version``, ``orm_labels.orm_version``, ``critic_values.critic_version``) still works on
Postgres; a short one is unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.db import repository as repo
from webrl.db.migrate import downgrade, upgrade
from webrl.db.session import session_scope
from webrl.models.loading import VERSION_FILE, checkpoint_version


def _folder(parent: Path, name: str, declared: str | None = None) -> Path:
    folder = parent / name
    folder.mkdir()
    if declared is not None:
        (folder / VERSION_FILE).write_text(json.dumps({"version": declared}))
    return folder


def test_short_names_and_versions_are_unchanged(tmp_path: Path) -> None:
    assert checkpoint_version(_folder(tmp_path, "orm-v1")) == "orm-v1"
    assert checkpoint_version(_folder(tmp_path, "a" * 80)) == "a" * 80
    assert checkpoint_version(_folder(tmp_path, "declared", "actor-p2-0123abcd")) == "actor-p2-0123abcd"


def test_a_name_longer_than_the_columns_is_its_start_and_a_digest(tmp_path: Path) -> None:
    long_name = "x" * 70 + "-first-run-of-a-long-experiment"
    version = checkpoint_version(_folder(tmp_path, long_name))
    assert version == "x" * 63 + "-" + hashlib.sha256(long_name.encode()).hexdigest()[:8] and len(version) == 72
    other = checkpoint_version(_folder(tmp_path, "x" * 70 + "-second-run-of-a-long-experiment"))
    assert other != version and other[:63] == version[:63]  # names that share their start stay apart
    declared = checkpoint_version(_folder(tmp_path, "declared", "v" * 200))
    assert len(declared) == 72 and declared.startswith("v" * 63 + "-")


@pytest.mark.postgres
def test_a_long_folder_name_is_stored_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    from webrl.agent.schemas import TaskConfig, Trajectory

    settings = Settings(home=tmp_path, database={"url": postgres_url}, _env_file=None)
    upgrade(settings)
    try:
        version = checkpoint_version(_folder(tmp_path, "orm-" + "y" * 120))
        with session_scope(settings) as s:
            config = TaskConfig.from_json({"task_id": 1, "sites": ["shopping"], "intent": "Find",
                                           "start_url": "__SHOPPING__"})
            task_id = repo.upsert_task(s, "k1", config, origin="seed", split="train").id
            traj = Trajectory(task_id="k1", intent="Find", actor_version=version)
            trajectory_id = repo.save_trajectory(s, task_id, 1, 0, traj).id
            repo.save_label(s, trajectory_id, version, 0.7, 0.5)
            repo.save_critic_values(s, version, [(task_id, 0.4)])
        with session_scope(settings) as s:
            assert repo.label_of(repo.trajectories_for_phase(s, 1, run_id=0)[0], version) is not None
    finally:
        downgrade(settings)  # the session's Postgres database stays empty for the next test
