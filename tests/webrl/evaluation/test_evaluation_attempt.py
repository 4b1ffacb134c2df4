"""An evaluation's attempt number: stable under the same conditions (the actor's content, the horizon, the serving
settings, the code that prompts and judges), new when any of them changes, so ``webrl eval`` reruns reuse their
trajectories and a stored evaluation is never made of episodes run under other conditions."""

from __future__ import annotations

import os
from pathlib import Path

from webrl.config import Settings
from webrl.orchestration.evaluate import evaluation_attempt


def test_attempt_follows_the_actors_content_the_horizon_and_the_serving_settings(settings: Settings,
                                                                                 tmp_path: Path) -> None:
    full, adapter = tmp_path / "full", tmp_path / "adapter"
    full.mkdir()
    adapter.mkdir()
    (full / "config.json").write_text("{}")
    (adapter / "adapter_config.json").write_text("{}")
    for folder in (full, adapter):
        attempt = evaluation_attempt(settings, folder)
        assert attempt >= 1 and attempt == evaluation_attempt(settings, folder)
        assert evaluation_attempt(settings, folder, 8) not in (attempt, evaluation_attempt(settings, folder, 10))
        config = next(folder.iterdir())
        os.utime(config, ns=(1, config.stat().st_mtime_ns + 10**9))  # touched, the same bytes: the same actor
        assert evaluation_attempt(settings, folder) == attempt
        (folder / "model.safetensors").write_bytes(b"retrained")  # another actor in the same folder
        assert evaluation_attempt(settings, folder) != attempt
    assert evaluation_attempt(settings, full) != evaluation_attempt(settings, adapter)
    bf16 = settings.model_copy(update={"models": settings.models.model_copy(update={"dtype": "bfloat16"})})
    assert evaluation_attempt(bf16, full) != evaluation_attempt(settings, full)  # never stored as fp32's
    shorter = settings.model_copy(update={"actor": settings.actor.model_copy(update={"max_prompt_tokens": 512})})
    assert evaluation_attempt(shorter, full) != evaluation_attempt(settings, full)


def test_an_edited_task_file_is_new_tasks_not_the_stored_configs(settings: Settings, tmp_path: Path) -> None:
    """The keys of an external file's tasks follow its content: the same file maps to the same tasks; an edited one
    (or another file of the same name) to new ones, never to the configs stored under the old keys."""
    import json

    from webrl.db import repository as repo
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope
    from webrl.orchestration.evaluate import external_task_keys

    upgrade(settings)
    config = {"task_id": 7, "sites": ["shopping"], "intent": "What is the price of the red pen?",
              "start_url": "__SHOPPING__", "require_login": False, "storage_state": None,
              "eval": {"eval_types": ["string_match"], "reference_answers": {"exact_match": "$1.00"}}}
    tasks = tmp_path / "lite.json"
    tasks.write_text(json.dumps([config]))
    first = external_task_keys(settings, tasks)
    assert first == external_task_keys(settings, tasks) and first[0].startswith("external/lite-")
    config["eval"]["reference_answers"] = {"exact_match": "$2.00"}  # a fixed reference answer
    tasks.write_text(json.dumps([config]))
    fixed = external_task_keys(settings, tasks)
    assert fixed != first and fixed[0].endswith("/7")
    with session_scope(settings) as s:
        (row,) = repo.tasks_by_keys(s, fixed)
        assert repo.task_config(row).to_json()["eval"]["reference_answers"] == {"exact_match": "$2.00"}
