"""The label stage's ``orm_accuracy`` measures an ORM: agreement of its rewards with the sandbox evaluators when
an ORM judged, None (judge "evaluators") when the evaluators gave the reward themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.config import Settings
from webrl.db.migrate import upgrade
from webrl.orchestration.pipeline import Pipeline, PipelineOptions

PAGES = ['<html><div id="5">Order placed</div></html>', '<html><div id="6">Error: out of stock</div></html>']


def _store(settings: Settings, n: int) -> list[int]:
    from webrl.db.repository import save_trajectory, upsert_task
    from webrl.db.session import session_scope

    ids = []
    with session_scope(settings) as session:
        for i in range(n):
            traj = Trajectory(task_id=f"t/{i}", intent=f"Buy item {i}", env_score=float(i % 2 == 0),
                              steps=[Step(index=0, observation=Observation(html=PAGES[i % 2], url="http://s/"),
                                          response='exit(message="done")')])
            config = TaskConfig(task_id=i, sites=["shopping"], intent=traj.intent, start_url="__SHOPPING__/")
            task = upsert_task(session, traj.task_id, config, origin="seed", split="train")
            ids.append(save_trajectory(session, task.id, 1, 0, traj).id)
    return ids


@pytest.fixture
def tiny_orm(tmp_path: Path) -> Path:
    from webrl.models.tiny import build_tiny_llama, build_tokenizer, save_tiny

    tokenizer = build_tokenizer(["Buy item YES NO", *PAGES], tmp_path / "orm", vocab_size=600)
    return save_tiny(build_tiny_llama(tokenizer, "test", seed=0), tokenizer, tmp_path / "orm")


def test_without_an_orm_nothing_is_measured(settings: Settings) -> None:
    upgrade(settings)
    ids = _store(settings, 6)
    metrics = Pipeline(settings, PipelineOptions(run="evaluators"))._label(ids, "phase 1: ORM")
    assert metrics["judge"] == "evaluators" and metrics["orm_accuracy"] is None  # not 100%: nothing judged
    assert metrics["labelled"] == 6 and metrics["reward_rate"] == 0.5


def test_with_an_orm_the_accuracy_is_its_agreement_with_the_evaluators(settings: Settings, tiny_orm: Path) -> None:
    from webrl.db import models as m
    from webrl.db.session import session_scope
    from webrl.models.loading import checkpoint_version

    upgrade(settings)
    ids = _store(settings, 6)
    metrics = Pipeline(settings, PipelineOptions(run="judged", orm=str(tiny_orm)))._label(ids, "phase 1: ORM")
    version = checkpoint_version(tiny_orm)
    with session_scope(settings) as s:
        rows = s.execute(select(m.OrmLabel.reward, m.TrajectoryRow.env_score)
                         .join(m.TrajectoryRow, m.TrajectoryRow.id == m.OrmLabel.trajectory_id)
                         .where(m.OrmLabel.orm_version == version)).all()
    assert len(rows) == 6
    agree = sum((reward > 0) == (score >= 1.0) for reward, score in rows)
    assert metrics["judge"] == f"orm:{version}"
    assert metrics["orm_accuracy"] == pytest.approx(agree / 6)
