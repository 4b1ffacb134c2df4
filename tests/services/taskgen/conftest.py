"""Fixtures for taskgen: a migrated database holding one failed parent task, what the generators grow from."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from webrl.config import Settings


def store_parent(settings: Settings, key: str = "p1") -> None:
    """Migrate the database of ``settings`` and store one seed task of the shopping site under ``key``."""
    from webrl.agent.schemas import TaskConfig
    from webrl.db import repository as repo
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope

    upgrade(settings)
    parent = TaskConfig.from_json({"task_id": 1, "sites": ["shopping"], "intent": "Find the cheapest red mug",
                                   "start_url": "__SHOPPING__"})
    with session_scope(settings) as session:
        repo.upsert_task(session, key, parent, origin="seed", split="train")


@pytest.fixture
def parent_task() -> Callable[..., None]:
    """:func:`store_parent`, called by tests once their settings are made."""
    return store_parent
