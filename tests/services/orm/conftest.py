"""Fixtures for the ORM service: the tiny default model (webrl.models.tiny) as the ORM, and stored trajectories."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.config import Settings

PAGES = ['<html><div id="5">Order placed</div></html>', '<html><div id="6">Error: out of stock</div></html>']


@pytest.fixture(scope="session")
def tiny_orm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webrl.models.tiny import build_tiny_llama, build_tokenizer, save_tiny

    out = tmp_path_factory.mktemp("tiny_orm")
    tokenizer = build_tokenizer(["Add the blue kettle to the cart YES NO", *PAGES], out, vocab_size=600)
    return save_tiny(build_tiny_llama(tokenizer, "test", seed=0), tokenizer, out)


def _make_trajectory(i: int, *, intent: str | None = None) -> Trajectory:
    page = PAGES[i % 2]
    steps = [Step(index=0, observation=Observation(html="<html><input id=\"13\"/></html>", url="http://s/"),
                  response=f'# Element: the search box\ndo(action="Search", argument="item {i}", element="13")'),
             Step(index=1, observation=Observation(html=page * (1 + i % 3), url="http://s/r"),
                  response='exit(message="done")')]
    return Trajectory(task_id=f"sandbox/test/{i}", intent=intent or f"Buy item {i}", steps=steps,
                      env_score=float(i % 2 == 0))


@pytest.fixture
def db_settings(settings: Settings) -> Settings:
    from webrl.db.migrate import upgrade

    upgrade(settings)
    return settings


def _store(settings: Settings, trajectories: list[Trajectory], phase: int = 1) -> list[int]:
    from webrl.db.repository import save_trajectory, upsert_task
    from webrl.db.session import session_scope

    ids = []
    with session_scope(settings) as session:
        for n, traj in enumerate(trajectories):
            config = TaskConfig(task_id=n, sites=["shopping"], intent=traj.intent, start_url="__SHOPPING__/")
            task = upsert_task(session, traj.task_id, config, origin="test", split="test")
            ids.append(save_trajectory(session, task.id, phase, 0, traj).id)
    return ids


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    return _make_trajectory


@pytest.fixture
def store() -> Callable[..., list[int]]:
    return _store
