"""The trainer's database side on the distributed backend: PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.trainer.data import first_success_examples, load_phase_examples
from webrl.config import Settings
from webrl.db.session import session_scope
from webrl.store.checkpoints import list_checkpoints, publish

pytestmark = pytest.mark.postgres


def test_phase_data_and_checkpoint_rows_on_postgres(settings: Settings, postgres_url: str, tmp_path: Path,
                                                    write_trajectory) -> None:
    from webrl.db.migrate import upgrade

    pg = settings.replace(database={"url": postgres_url})
    upgrade(pg)
    write_trajectory(pg, "pg-a", 1, 0, ['do(action="Click", element="3")', 'exit(message="ok")'], reward=1.0)
    write_trajectory(pg, "pg-b", 2, 0, ['exit(message="no")'], reward=0.0)

    def prompt(intent: str, history, html: str) -> str:
        return f"{intent}/{len(history)}"

    with session_scope(pg) as session:
        current = load_phase_examples(session, 2, prompt, run_id=0)
        replayed = first_success_examples(session, 2, prompt, run_id=0)
    assert [(e.task_key, e.reward) for e in current] == [("pg-b", 0.0)]
    assert [(e.task_key, e.index, e.mc_return) for e in replayed] == [("pg-a", 0, pytest.approx(1.9)),
                                                                      ("pg-a", 1, 1.0)]
    info = publish(pg, lambda f: (f / "config.json").write_text("{}"), tmp_path / "pg-actor", role="actor",
                   version="pg-v1", phase=2, metrics={"kl": 0.01})
    with session_scope(pg) as session:
        rows = list_checkpoints(session, "actor")
    assert [(r.version, r.sha256, r.metrics) for r in rows if r.version == "pg-v1"] == [
        ("pg-v1", info.sha256, {"kl": 0.01})]
