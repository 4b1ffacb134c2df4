"""Every insert of a unique key survives a concurrent writer of the same key (two deliveries of one job, a resumed
pipeline beside its killed one's job, two commands on one laptop database): the late writer looked before the first
committed and found nothing, inserts after it did, gets the first's row without an ``IntegrityError``, and its
transaction goes on (:func:`webrl.db.repository.insert_once`). On the real PostgreSQL (a savepoint) and on SQLite
(the write lock, then a second look)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.migrate import downgrade, upgrade
from webrl.db.session import session_scope
from webrl.orchestration.pipeline_state import PipelineOptions, RunStore
from webrl.store.checkpoints import CheckpointInfo, record

T = TypeVar("T")


@pytest.fixture
def pg(postgres_url: str, tmp_path: Path) -> Iterator[Settings]:
    """The per-session PostgreSQL database, its tables created and dropped around the test."""
    settings = Settings(home=tmp_path, database={"url": postgres_url}, _env_file=None)
    downgrade(settings)  # the per-session database may hold rows an earlier test left: the counts start from none
    upgrade(settings)
    yield settings
    downgrade(settings)  # leaves the per-session Postgres database empty for the next test


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Each database a run can be on: the embedded SQLite file and the per-session PostgreSQL database."""
    if request.param == "postgres":
        return request.getfixturevalue("pg")
    settings = Settings(home=tmp_path, _env_file=None)
    upgrade(settings)
    return settings


def _miss_once(look: Callable[..., Any], miss: Any = None) -> Callable[..., Any]:
    """``look`` that answers ``miss`` once (the look before the first writer committed), then looks."""
    calls: list[int] = []

    def missed(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return miss if len(calls) == 1 else look(*args, **kwargs)

    return missed


def _task(s: Session, n: int) -> int:
    config = TaskConfig.from_json({"task_id": n, "sites": ["shopping"], "intent": f"Find item {n}",
                                   "start_url": "__SHOPPING__"})
    return repo.upsert_task(s, f"k{n}", config, origin="seed", split="train").id


def _count(settings: Settings, model: type[m.Base]) -> int:
    with session_scope(settings) as s:
        return s.scalar(select(func.count()).select_from(model)) or 0


def _race(settings: Settings, first: Callable[[Session], Any], late: Callable[[Session], T]) -> T:
    """``first`` and then ``late`` write in two transactions at once: ``first`` writes (uncommitted), ``late`` writes
    in another thread (its look finds nothing committed; its insert waits on the first's uncommitted key), then
    ``first`` commits, and ``late``'s insert meets the committed key. What ``late`` returned, once it committed."""
    with ThreadPoolExecutor(1) as pool:
        with session_scope(settings) as s:
            first(s)
            s.flush()
            waiting = pool.submit(_in_transaction, settings, late)
            _wait_for_a_lock(settings, waiting)
        return waiting.result(timeout=60)


def _in_transaction(settings: Settings, write: Callable[[Session], T]) -> T:
    with session_scope(settings) as s:
        result = write(s)
        _task(s, 99)  # the transaction goes on after the lost insert
        return result


def _wait_for_a_lock(settings: Settings, waiting: Future[Any]) -> None:
    """Until a session of this database waits on a lock (the late insert, on the first's key)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not waiting.done():
        with session_scope(settings) as s:
            if s.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                             "AND wait_event_type = 'Lock'")):
                return
        time.sleep(0.05)
    waiting.result(timeout=0)  # the late writer's error, if it failed before it waited
    raise AssertionError("the late writer never waited on the first's key")


@pytest.mark.postgres
def test_critic_values_that_lose_the_race_keep_the_winners(pg: Settings) -> None:
    with session_scope(pg) as s:
        tasks = [_task(s, 1), _task(s, 2)]
    _race(pg, lambda s: repo.save_critic_values(s, "c1", [(tasks[0], 0.3)]),
          lambda s: repo.save_critic_values(s, "c1", [(tasks[0], 0.9), (tasks[1], 0.5)]))
    with session_scope(pg) as s:
        assert sorted(s.execute(select(m.CriticValue.task_id, m.CriticValue.value)).tuples()) == [
            (tasks[0], 0.3), (tasks[1], 0.5)]
    assert _count(pg, m.Task) == 3


@pytest.mark.postgres
def test_step_values_that_lose_the_race_overwrite_the_winners(pg: Settings) -> None:
    """A retried phase's values stand (:func:`webrl.db.repository.save_step_values`), a racing one's too."""
    obs = Observation(html="<p>x</p>", url="http://s/")
    traj = Trajectory(task_id="k1", intent="Find", steps=[Step(index=i, observation=obs, response="r")
                                                         for i in range(2)])
    with session_scope(pg) as s:
        trajectory_id = repo.save_trajectory(s, _task(s, 1), phase=1, attempt=0, traj=traj).id

    def values(v: float) -> list[repo.StepValues]:
        return [repo.StepValues(trajectory_id, i, v, v, v, 1.0, True) for i in range(2)]

    new = _race(pg, lambda s: repo.save_step_values(s, "c1", 1, values(0.1)),
                lambda s: repo.save_step_values(s, "c1", 1, values(0.7)))
    assert new == 0
    with session_scope(pg) as s:
        assert sorted(s.scalars(select(m.StepValue.v_s))) == [0.7, 0.7]
    assert _count(pg, m.Task) == 2


@pytest.mark.postgres
def test_a_checkpoint_recorded_by_a_racing_delivery_is_brought_up_to_date(pg: Settings) -> None:
    first = CheckpointInfo(role="actor", version="v1", path="/a/v1", sha256="a" * 64, phase=1)
    again = CheckpointInfo(role="actor", version="v1", path="/a/v1", sha256="b" * 64, phase=1)
    _race(pg, lambda s: record(s, first), lambda s: record(s, again))
    with session_scope(pg) as s:  # the folder now on disk, as a retried publish brings it
        assert s.scalars(select(m.Checkpoint.sha256)).all() == ["b" * 64]
    assert _count(pg, m.Task) == 1


def test_a_checkpoint_whose_look_missed_the_winners_row_gets_it(db: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    first = CheckpointInfo(role="orm", version="v1", path="/o/v1", sha256="a" * 64)
    with session_scope(db) as late:
        late.execute(select(m.Task.id))
        with session_scope(db) as winner:
            winner_id = record(winner, first).id
        monkeypatch.setattr(late, "scalar", _miss_once(late.scalar))
        assert record(late, first).id == winner_id
        _task(late, 1)
    assert _count(db, m.Checkpoint) == 1 and _count(db, m.Task) == 1


def test_critic_values_whose_look_missed_the_winners_keep_them(db: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with session_scope(db) as s:
        tasks = [_task(s, 1), _task(s, 2)]
    with session_scope(db) as late:
        late.execute(select(m.Task.id))
        with session_scope(db) as winner:
            repo.save_critic_values(winner, "c1", [(tasks[0], 0.3)])
        monkeypatch.setattr(repo, "stored_critic_values", _miss_once(repo.stored_critic_values, miss={}))
        repo.save_critic_values(late, "c1", [(tasks[0], 0.9), (tasks[1], 0.5)])
        _task(late, 3)
    with session_scope(db) as s:
        assert sorted(s.execute(select(m.CriticValue.task_id, m.CriticValue.value)).tuples()) == [
            (tasks[0], 0.3), (tasks[1], 0.5)]
    assert _count(db, m.Task) == 3


def test_a_sqlite_writer_waits_for_the_other_and_then_looks_again(tmp_path: Path) -> None:
    """Two connections to one SQLite file, the first with its key written and not committed: the late one's look
    finds nothing, its insert waits on the first's write lock, and, once the first commits, finds the first's row."""
    settings = Settings(home=tmp_path, _env_file=None)
    upgrade(settings)
    first = CheckpointInfo(role="actor", version="v1", path="/a/v1", sha256="a" * 64, phase=1)
    with ThreadPoolExecutor(1) as pool:
        with session_scope(settings) as s:
            first_id = record(s, first).id
            waiting = pool.submit(_in_transaction, settings, lambda late: record(late, first).id)
            time.sleep(0.5)  # the late writer looks (nothing committed) and waits on the lock
            assert not waiting.done()
        assert waiting.result(timeout=60) == first_id
    assert _count(settings, m.Checkpoint) == 1 and _count(settings, m.Task) == 1


def test_a_run_opened_twice_at_once_is_one_run(db: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """The late open missed the run the first created: it resumes that run (its options) instead."""
    store, _ = RunStore.open(db, PipelineOptions(run="r", seed=1))
    monkeypatch.setattr(RunStore, "_run", staticmethod(_miss_once(RunStore._run)))
    again, options = RunStore.open(db, PipelineOptions(run="r", seed=2))
    assert again.run_id == store.run_id and options.seed == 1
    assert _count(db, m.Run) == 1


@pytest.mark.postgres
def test_a_phase_row_created_by_a_racing_writer_is_the_one_used(pg: Settings) -> None:
    store, _ = RunStore.open(pg, PipelineOptions(run="r"))
    _race(pg, lambda s: store.phase_row(s, 1), lambda s: store.phase_row(s, 1))
    assert _count(pg, m.Phase) == 1 and _count(pg, m.Task) == 1


def test_a_suite_another_process_loaded_after_the_look_is_kept(db: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two commands on a fresh database both load the sandbox suite: the late one looked before the first committed
    and found no task; its insert keeps the first's rows."""
    from webrl.sandbox.tasks import suite

    counts = suite.load_suite(db)
    with session_scope(db) as s:
        ids = {key: id_ for key, id_ in s.execute(select(m.Task.key, m.Task.id))}
    monkeypatch.setattr(suite, "stored_sandbox_keys", _miss_once(suite.stored_sandbox_keys, miss=set()))
    assert suite.load_suite(db) == counts
    with session_scope(db) as s:
        assert {key: id_ for key, id_ in s.execute(select(m.Task.key, m.Task.id))} == ids
    assert len(ids) == sum(counts.values())
