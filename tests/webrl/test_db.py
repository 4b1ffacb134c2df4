"""The repository layer on SQLite and on the real PostgreSQL: migrations, idempotent writes, rollback."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, inspect, select

from webrl.agent.actions import Action, ActionType
from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.migrate import downgrade, upgrade
from webrl.db.session import get_engine, session_scope
from webrl.method.rewards import reward_of

TABLES = {"tasks", "trajectories", "steps", "orm_labels", "critic_values", "runs", "phases", "checkpoints",
          "step_values", "generation_requests"}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'webrl.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    s = Settings(home=tmp_path, database={"url": url}, _env_file=None)
    upgrade(s)
    yield s
    downgrade(s)  # leaves the per-session Postgres database empty for the next test


def _task(n: int = 1) -> TaskConfig:
    return TaskConfig.from_json({
        "task_id": n, "sites": ["shopping"], "intent": f"Find the price of item {n}!",
        "start_url": "__SHOPPING__", "eval": {"eval_types": ["string_match"],
                                               "reference_answers": {"exact_match": "$3"}},
        "extra_field": {"kept": True},
    })


def _trajectory(n_steps: int = 3) -> Trajectory:
    obs = Observation(html="<button id=\"1\">Go</button>", url="http://s/")
    steps = [
        Step(index=i, observation=obs, response='do(action="Click", element="1")',
             action=Action(type=ActionType.CLICK, element="1"), token_ids=[5, 6, 7], logprobs=[-0.1, -0.2, -0.3])
        for i in range(n_steps)
    ]
    return Trajectory(task_id="k1", intent="Find", actor_version="v1", steps=steps, answer="$3",
                      stop_reason="exit", env_score=1.0, last_observation=obs)


def test_migrations_create_every_table(db: Settings) -> None:
    assert TABLES <= set(inspect(get_engine(db)).get_table_names())


def test_the_migrations_build_the_schema_the_models_declare(db: Settings) -> None:
    """A model changed without its migration (or the reverse) is a difference alembic's autogenerate finds."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with get_engine(db).connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), m.Base.metadata)
    assert differences == []


def test_task_upsert_is_idempotent_and_keeps_the_config(db: Settings) -> None:
    with session_scope(db) as s:
        first = repo.upsert_task(s, "sandbox/train/1", _task(), origin="seed", split="train")
        again = repo.upsert_task(s, "sandbox/train/1", _task(), origin="seed", split="train")
        assert first.id == again.id
    with session_scope(db) as s:
        (row,) = repo.tasks_where(s, split="train")
        assert repo.task_config(row).to_json() == _task().to_json()
        assert row.intent_norm == "find the price of item 1"
        assert row.site == "shopping"


def test_tasks_upsert_in_bulk_keys_by_prefix_and_task_id_idempotently(db: Settings) -> None:
    with session_scope(db) as s:
        keys = repo.upsert_tasks(s, [_task(3), _task(1)], "external/lite", origin="external", split="external")
        assert keys == ["external/lite/3", "external/lite/1"]  # in the configs' order
        assert repo.upsert_tasks(s, [_task(1)], "external/lite", origin="external", split="external") == keys[1:]
    with session_scope(db) as s:
        rows = repo.tasks_where(s, split="external")
        assert sorted(row.key for row in rows) == sorted(keys)
        assert {row.origin for row in rows} == {"external"}


def test_evaluation_scores_per_site_and_solved_tasks_come_from_one_read(db: Settings) -> None:
    from webrl.orchestration.evaluate import solved_task_keys, success_by_site, trajectory_scores

    reddit = TaskConfig.from_json({**_task(2).to_json(), "sites": ["reddit"], "start_url": "__REDDIT__"})
    with session_scope(db) as s:
        shop, forum = (repo.upsert_task(s, key, config, origin="seed", split="test")
                       for key, config in (("t/shop", _task(1)), ("t/forum", reddit)))
        ids = [repo.save_trajectory(s, shop.id, phase=1, attempt=0, traj=_trajectory()).id,
               repo.save_trajectory(s, forum.id, phase=1, attempt=0,
                                    traj=_trajectory().model_copy(update={"env_score": None})).id,
               repo.save_trajectory(s, forum.id, phase=1, attempt=1,
                                    traj=_trajectory().model_copy(update={"env_score": 0.0})).id]
    scores = trajectory_scores(db, ids)
    assert [(x.key, x.site, x.score) for x in scores] == [("t/shop", "shopping", 1.0), ("t/forum", "reddit", 0.0),
                                                          ("t/forum", "reddit", 0.0)]  # unscored counts as 0
    assert success_by_site(scores) == {"shopping": (1, 1.0), "reddit": (2, 0.0), "overall": (3, 1 / 3)}
    assert solved_task_keys(scores) == ["t/shop"]
    assert success_by_site([]) == {"overall": (0, 0.0)}


def test_stored_labels_take_their_reward_from_the_reward_rule(db: Settings) -> None:
    with session_scope(db) as s:
        task = repo.upsert_task(s, "k1", _task(), origin="seed", split="train")
        ids = [repo.save_trajectory(s, task.id, phase=1, attempt=a, traj=_trajectory()).id for a in range(3)]
        p = [0.59, 0.6, 0.9]
        labels = [repo.save_label(s, tid, "orm-v1", p_yes=x, threshold=0.6) for tid, x in zip(ids, p, strict=True)]
        rewards = [label.reward for label in labels]
        assert rewards == [reward_of(x, 0.6) for x in p] == [0.0, 1.0, 1.0]


def test_a_trajectorys_label_is_its_runs_orms_or_else_the_latest(db: Settings) -> None:
    with session_scope(db) as s:
        task = repo.upsert_task(s, "k1", _task(), origin="seed", split="train")
        judged, unjudged = (repo.save_trajectory(s, task.id, phase=1, attempt=a, traj=_trajectory()).id
                            for a in range(2))
        repo.save_label(s, judged, "orm-run", p_yes=0.9, threshold=0.5)
        repo.save_label(s, judged, "orm-later", p_yes=0.1, threshold=0.5)  # another ORM judged it afterwards
    with session_scope(db) as s:
        row, bare = repo.trajectories_for_phase(s, 1, run_id=m.NO_RUN)
        assert repo.label_of(row, "orm-run").reward == 1.0  # the run's ORM's label, whoever wrote later
        assert repo.label_of(row).orm_version == "orm-later"  # no version named: the latest
        assert repo.label_of(row, "orm-other") is None  # another ORM's label never stands in
        assert bare.id == unjudged and repo.label_of(bare) is None and repo.label_of(bare, "orm-run") is None


def test_trajectory_save_is_idempotent_and_reloads_exactly(db: Settings) -> None:
    with session_scope(db) as s:
        task = repo.upsert_task(s, "k1", _task(), origin="seed", split="train")
        t1 = repo.save_trajectory(s, task.id, phase=1, attempt=0, traj=_trajectory())
        t2 = repo.save_trajectory(s, task.id, phase=1, attempt=0, traj=_trajectory(5))
        assert t1.id == t2.id
        repo.save_label(s, t1.id, "orm-v1", p_yes=0.7, threshold=0.5)
        repo.save_label(s, t1.id, "orm-v1", p_yes=0.1, threshold=0.5)  # second call changes nothing
    with session_scope(db) as s:
        assert s.scalar(select(func.count()).select_from(m.StepRow)) == 3
        (row,) = repo.trajectories_for_phase(s, 1, run_id=m.NO_RUN)
        loaded = repo.load_trajectory(row)
        original = _trajectory()
        assert loaded.steps == original.steps
        assert loaded.reward == 1.0 and loaded.orm_p == pytest.approx(0.7)
        assert loaded.last_observation == original.last_observation


def test_a_save_that_loses_the_race_to_another_writer_returns_the_winners_row(db: Settings,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deliveries of one job store the same trajectory: the late one looked before the first committed and
    found nothing, then inserts after it did. It gets the first's row, its transaction goes on, and nothing is
    stored twice."""
    if db.database.url.startswith("sqlite"):
        pytest.skip("SQLite serialises its writers: a late writer cannot have looked before the first committed")
    with session_scope(db) as s:
        task_id = repo.upsert_task(s, "k1", _task(), origin="seed", split="train").id
    with session_scope(db) as late:
        late.execute(select(m.Task.id))  # the late writer's transaction is open throughout
        with session_scope(db) as winner:
            winner_id = repo.save_trajectory(winner, task_id, phase=1, attempt=0, traj=_trajectory()).id
        monkeypatch.setattr(repo, "find_trajectory", _none_then_real(repo.find_trajectory))
        again = repo.save_trajectory(late, task_id, phase=1, attempt=0, traj=_trajectory(5))
        assert again.id == winner_id and len(again.steps) == 3
        repo.upsert_task(late, "k2", _task(2), origin="seed", split="train")  # the transaction goes on
    with session_scope(db) as s:
        assert s.scalar(select(func.count()).select_from(m.TrajectoryRow)) == 1
        assert s.scalar(select(func.count()).select_from(m.StepRow)) == 3
        assert {t.key for t in s.scalars(select(m.Task))} == {"k1", "k2"}


def _none_then_real(find: Callable[..., m.TrajectoryRow | None]) -> Callable[..., m.TrajectoryRow | None]:
    """``find_trajectory`` that answers None once (the look before the first writer committed), then looks."""
    calls: list[int] = []

    def look(*args: Any, **kwargs: Any) -> m.TrajectoryRow | None:
        calls.append(1)
        return None if len(calls) == 1 else find(*args, **kwargs)

    return look


def test_nul_characters_in_model_output_are_stored_as_replacement_characters(db: Settings) -> None:
    """A sampled byte-level token can decode to NUL, which Postgres text refuses (found by the distributed smoke)."""
    traj = _trajectory(1)
    traj.steps[0].response = "do(\x00"
    traj.steps[0].parse_error = "not a function call: 'do(\x00'"
    traj.answer = "a\x00b"
    with session_scope(db) as s:
        task = repo.upsert_task(s, "k1", _task(), origin="seed", split="train")
        repo.save_trajectory(s, task.id, phase=1, attempt=0, traj=traj)
    with session_scope(db) as s:
        (row,) = repo.trajectories_for_phase(s, 1, run_id=m.NO_RUN)
        loaded = repo.load_trajectory(row)
        assert loaded.steps[0].response == "do(\ufffd" and loaded.answer == "a\ufffdb"
        assert "\x00" not in (loaded.steps[0].parse_error or "")


def test_a_failed_transaction_loses_nothing_already_stored(db: Settings) -> None:
    with session_scope(db) as s:
        repo.upsert_task(s, "kept", _task(1), origin="seed", split="train")
    with pytest.raises(RuntimeError), session_scope(db) as s:
        repo.upsert_task(s, "rolled-back", _task(2), origin="seed", split="train")
        raise RuntimeError("crash mid-write")
    with session_scope(db) as s:
        assert [t.key for t in repo.tasks_where(s)] == ["kept"]


def test_critic_values_are_idempotent_per_version(db: Settings) -> None:
    with session_scope(db) as s:
        task = repo.upsert_task(s, "k", _task(), origin="seed", split="train")
        repo.save_critic_values(s, "c1", [(task.id, 0.3)])
        repo.save_critic_values(s, "c1", [(task.id, 0.9)])
        repo.save_critic_values(s, "c2", [(task.id, 0.5)])
    with session_scope(db) as s:
        values = sorted(s.scalars(select(m.CriticValue.value)).all())
        assert values == [0.3, 0.5]


def test_migration_0002_moves_stage_outputs_from_metrics_to_the_phase_state(db: Settings) -> None:
    import json

    from sqlalchemy import text

    downgrade(db, "0001")
    old = {"generate.candidate_keys": ["a", "b"], "filter.kept_keys": ["a"], "train.actor_path": "/m/actor",
           "train.actor_version": "phase1-x", "train.loss": 0.5}
    with get_engine(db).begin() as conn:
        run_id = conn.execute(text("INSERT INTO runs (name, options, created_at) VALUES ('r', '{}', "
                                   "CURRENT_TIMESTAMP) RETURNING id")).scalar_one()
        conn.execute(text("INSERT INTO phases (run_id, \"index\", status, stages_done, metrics, started_at) "
                          "VALUES (:run, 1, 'running', '[]', :metrics, CURRENT_TIMESTAMP)"),
                     {"run": run_id, "metrics": json.dumps(old)})
    upgrade(db)
    with session_scope(db) as s:
        phase = s.scalars(select(m.Phase)).one()
        assert phase.state == {"candidate_keys": ["a", "b"], "kept_keys": ["a"], "actor_path": "/m/actor",
                               "actor_version": "phase1-x"}
        assert phase.metrics == {"train.loss": 0.5}


def test_step_values_are_stored_once_per_step_and_critic(db: Settings) -> None:
    with session_scope(db) as s:
        task = repo.upsert_task(s, "sandbox/train/1", _task(), origin="seed", split="train")
        traj = repo.save_trajectory(s, task.id, 1, 0, _trajectory(3))
        values = [repo.StepValues(traj.id, i, 0.2, 0.4, 0.15 - 0.1 * i, 1.0 if i == 0 else -0.6, i == 0)
                  for i in range(3)]
        assert repo.save_step_values(s, "c1", 1, [*values, repo.StepValues(traj.id, 9, 0, 0, 0, 0, False)]) == 3
        assert repo.save_step_values(s, "c1", 1, values) == 0  # idempotent
        retrained = [dataclasses.replace(v, v_s=0.3) if v.index == 1 else v for v in values]  # a retry, not identical
        assert repo.save_step_values(s, "c1", 1, retrained) == 0  # still one row per step: the retry's values
        assert sorted(s.scalars(select(m.StepValue.v_s).where(m.StepValue.critic_version == "c1"))) == [0.2, 0.2, 0.3]
        assert repo.save_step_values(s, "c2", 2, values[:1]) == 1  # another phase's critic: its own row
    with session_scope(db) as s:
        rows = s.scalars(select(m.StepValue).order_by(m.StepValue.id)).all()
        assert [(r.critic_version, r.phase, r.used) for r in rows] == [("c1", 1, True), ("c1", 1, False),
                                                                       ("c1", 1, False), ("c2", 2, True)]
        s.delete(s.get(m.TrajectoryRow, traj.id))
    with session_scope(db) as s:
        assert s.scalar(select(func.count()).select_from(m.StepValue)) == 0  # they go with their steps


def test_runs_own_their_trajectories_and_each_save_is_idempotent_within_its_run(db: Settings) -> None:
    """Two pipeline runs (and a stand-alone rollout, run 0) of the same (task, phase, attempt) store one trajectory
    each; a second save within a run returns that run's row; a phase's trajectories are read per run."""
    with session_scope(db) as s:
        task = repo.upsert_task(s, "k1", _task(), origin="seed", split="train")
        ids = {run: repo.save_trajectory(s, task.id, 1, 0, _trajectory(run + 1), run_id=run).id for run in (0, 1, 2)}
        assert len(set(ids.values())) == 3
        assert {run: repo.save_trajectory(s, task.id, 1, 0, _trajectory(), run_id=run).id for run in ids} == ids
    with session_scope(db) as s:
        for run, tid in ids.items():
            assert [t.id for t in repo.trajectories_for_phase(s, 1, run_id=run)] == [tid]
            assert repo.find_trajectory(s, task.id, 1, 0, run_id=run).n_steps == run + 1
        assert repo.find_trajectory(s, task.id, 1, 0, run_id=3) is None


def _old_trajectory(conn, task_id: int, attempt: int) -> int:
    """A trajectory with one step and one label, inserted as revision 0004 stored them (no run)."""
    from sqlalchemy import text

    tid = conn.execute(text("INSERT INTO trajectories (task_id, phase, attempt, purpose, actor_version, stop_reason, "
                            "n_steps, created_at) VALUES (:task, 1, :attempt, 'train', 'v', 'exit', 1, "
                            "CURRENT_TIMESTAMP) RETURNING id"), {"task": task_id, "attempt": attempt}).scalar_one()
    step = conn.execute(text("INSERT INTO steps (trajectory_id, \"index\", observation, response, token_ids, logprobs, "
                             "url) VALUES (:t, 0, '{}', 'r', '[]', '[]', '') RETURNING id"), {"t": tid}).scalar_one()
    conn.execute(text("INSERT INTO orm_labels (trajectory_id, orm_version, p_yes, reward, threshold, created_at) "
                      "VALUES (:t, 'orm', 1.0, 1.0, 0.5, CURRENT_TIMESTAMP)"), {"t": tid})
    conn.execute(text("INSERT INTO step_values (step_id, critic_version, phase, v_s, v_next, advantage, "
                      "advantage_binarised, used, created_at) VALUES (:s, 'c', 1, 0, 0, 0, 0, true, "
                      "CURRENT_TIMESTAMP)"), {"s": step})
    return tid


def _counts(db: Settings) -> dict[str, int]:
    with session_scope(db) as s:
        return {table.__tablename__: s.scalar(select(func.count()).select_from(table))
                for table in (m.TrajectoryRow, m.StepRow, m.OrmLabel, m.StepValue)}


def test_migration_0005_keeps_old_trajectories_as_run_0_and_downgrades(db: Settings) -> None:
    """Rows stored before 0005 become run 0 with their steps, labels and step values intact (SQLite rebuilds the
    table, which must not cascade); the downgrade keeps the oldest of each (task, phase, attempt) with its rows."""
    downgrade(db, "0004")
    with session_scope(db) as s:
        task_id = repo.upsert_task(s, "k1", _task(), origin="seed", split="train").id
    with get_engine(db).begin() as conn:
        old = [_old_trajectory(conn, task_id, attempt) for attempt in (0, 1)]
    upgrade(db)
    assert _counts(db) == {"trajectories": 2, "steps": 2, "orm_labels": 2, "step_values": 2}
    with session_scope(db) as s:
        assert [t.id for t in repo.trajectories_for_phase(s, 1, run_id=m.NO_RUN)] == old
        run_copy = repo.save_trajectory(s, task_id, 1, 0, _trajectory(2), run_id=7)  # the new key admits it
        repo.save_label(s, run_copy.id, "orm", p_yes=1.0, threshold=0.5)
        assert run_copy.id not in old
    downgrade(db, "0004")
    assert _counts(db) == {"trajectories": 2, "steps": 2, "orm_labels": 2, "step_values": 2}
    assert "run_id" not in {c["name"] for c in inspect(get_engine(db)).get_columns("trajectories")}
    upgrade(db)
    with session_scope(db) as s:
        assert [t.id for t in repo.trajectories_for_phase(s, 1, run_id=m.NO_RUN)] == old


def test_migration_0005_gives_the_only_runs_pipeline_rows_to_it(db: Settings) -> None:
    """A database holding one run (a `make demo` stopped before the upgrade): its pipeline's rows (attempt 0) become
    the run's, so it resumes with its own trajectories; a stand-alone evaluation's (attempt >= 1) stays run 0."""
    from sqlalchemy import text

    downgrade(db, "0004")
    with session_scope(db) as s:
        task_id = repo.upsert_task(s, "k1", _task(), origin="seed", split="train").id
    with get_engine(db).begin() as conn:
        run_id = conn.execute(text("INSERT INTO runs (name, options, created_at) VALUES ('demo', '{}', "
                                   "CURRENT_TIMESTAMP) RETURNING id")).scalar_one()
        pipeline_row, stand_alone = (_old_trajectory(conn, task_id, attempt) for attempt in (0, 1))
    upgrade(db)
    with session_scope(db) as s:
        assert [t.id for t in repo.trajectories_for_phase(s, 1, run_id=run_id)] == [pipeline_row]
        assert [t.id for t in repo.trajectories_for_phase(s, 1, run_id=m.NO_RUN)] == [stand_alone]
