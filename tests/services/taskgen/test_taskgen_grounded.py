"""Grounded generation on the real sandbox suite: valid WebArena configs with lineage, never a test intent
or a held-out template, and evaluators the oracle solvers satisfy through real Chromium."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from services.taskgen.curriculum import generate_grounded
from services.taskgen.grounded import GroundedGenerator
from webrl.config import Settings
from webrl.db import models as m
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.evaluation import build_evaluator
from webrl.sandbox.tasks.suite import load_suite


@pytest.fixture
def suite_db(free_sites: Settings) -> Settings:
    """Sandbox sites on free ports, the database migrated and the task suite loaded."""
    upgrade(free_sites)
    load_suite(free_sites, free_sites.seed)
    return free_sites


def _parents(settings: Settings, n: int) -> list[str]:
    with session_scope(settings) as s:
        train = repo.tasks_where(s, split="train", origin="seed")
    by_site: dict[str, list[str]] = {}
    for t in train:
        by_site.setdefault(t.site, []).append(t.key)
    return [keys[i * 7] for keys in by_site.values() for i in range(n)]


def test_grounded_tasks_are_new_valid_and_carry_their_lineage(suite_db: Settings) -> None:
    parents = _parents(suite_db, 2)
    first = generate_grounded(suite_db, phase=1, parent_keys=parents, n=12, seed=3)
    again = generate_grounded(suite_db, phase=1, parent_keys=parents, n=12, seed=3)
    assert len(first.task_keys) == 12
    assert not set(again.task_keys) & set(first.task_keys)  # the first batch is stored now: never proposed again
    held_out = GroundedGenerator().held_out
    with session_scope(suite_db) as s:
        test_intents = {t.intent_norm for t in repo.tasks_where(s, split="test")}
        rows = repo.tasks_by_keys(s, first.task_keys)
        parent_ids = {t.id for t in repo.tasks_by_keys(s, parents)}
        for row in rows:
            config = repo.task_config(row)
            assert row.origin == "generated" and row.phase == 1 and row.generator == "grounded"
            assert row.parent_id in parent_ids
            assert row.intent_norm not in test_intents
            assert config.intent_template_id not in held_out
            assert config.eval is not None and config.start_url.startswith("__")
            build_evaluator(config, suite_db)  # a reference evaluator exists and builds
        assert len({r.intent_norm for r in rows}) == len(rows)
        assert s.scalar(select(m.Task).where(m.Task.key == first.task_keys[0])).config["task_id"].startswith("gen-p1-")


def test_instances_are_new_tasks_of_each_parents_own_template_alone(suite_db: Settings) -> None:
    """``evolve="instances"`` (``curriculum.solved_share``): new instances of a solved parent's template, never a
    related template; in breadth the same parents also grow related templates."""
    parents = _parents(suite_db, 2)[:2]  # shopping: templates over the catalogue, many instances not in the suite
    instances = generate_grounded(suite_db, phase=1, parent_keys=parents, n=6, seed=3, instances_only=True)
    breadth = generate_grounded(suite_db, phase=2, parent_keys=parents, n=6, seed=3)
    with session_scope(suite_db) as s:
        template_of = {t.key: repo.task_config(t).intent_template_id for t in repo.tasks_by_keys(s, parents)}
        key_of = {t.id: t.key for t in repo.tasks_by_keys(s, parents)}

        def templates(keys: list[str]) -> list[tuple[int | None, int | None]]:
            return [(repo.task_config(t).intent_template_id, template_of[key_of[t.parent_id]])
                    for t in repo.tasks_by_keys(s, keys)]

        made = templates(instances.task_keys)
        grown = templates(breadth.task_keys)
    assert len(made) == 6 and all(template == parent for template, parent in made)  # the parents' own templates
    assert any(template != parent for template, parent in grown)  # breadth: related templates too


def test_a_retried_request_returns_the_batch_it_stored_and_stores_nothing_more(suite_db: Settings) -> None:
    """A worker killed after taskgen's commit, or a pipeline killed before its generate stage finished, sends the
    same request again: it gets the same keys (the batch the phase began with), not the next batch past them."""
    from services.taskgen.curriculum import generate
    from webrl.db import models as m
    from webrl.wire.contracts import GenerateRequest

    request = GenerateRequest(phase=1, parent_keys=_parents(suite_db, 2), n=8, seed=3)

    def generated() -> int:
        with session_scope(suite_db) as s:
            return len(repo.tasks_where(s, origin="generated"))

    first = generate(suite_db, request)
    assert len(first.task_keys) == 8 and generated() == 8
    assert generate(suite_db, request).task_keys == first.task_keys and generated() == 8
    other = generate(suite_db, request.model_copy(update={"seed": 4}))  # another request: new tasks past the stored
    assert len(other.task_keys) == 8 and not set(other.task_keys) & set(first.task_keys) and generated() == 16
    with session_scope(suite_db) as s:
        assert s.query(m.GenerationRequest).count() == 2


def test_the_llm_generator_refuses_instances_naming_the_field(suite_db: Settings) -> None:
    from services.taskgen.curriculum import generate
    from webrl.wire.contracts import GenerateRequest, InvalidRequest

    with pytest.raises(InvalidRequest) as refused:
        generate(suite_db, GenerateRequest(phase=1, parent_keys=_parents(suite_db, 1), n=2, generator="llm",
                                           evolve="instances"))
    assert refused.value.field == "evolve"


@pytest.mark.browser
def test_the_oracle_solves_generated_tasks(suite_db: Settings) -> None:
    from services.browser_pool.pool import BrowserPool
    from services.browser_pool.runs import run_batch
    from webrl.sandbox.oracles import OraclePolicy
    from webrl.sandbox.server import running_sandbox, sandbox_ports

    keys = generate_grounded(suite_db, phase=1, parent_keys=_parents(suite_db, 1), n=6, seed=11).task_keys
    with session_scope(suite_db) as s:
        configs = [repo.task_config(r) for r in repo.tasks_by_keys(s, keys)]

    async def run() -> list[float | None]:
        async with BrowserPool(suite_db, size=3) as pool:
            trajectories = await run_batch(configs, OraclePolicy(), pool, suite_db, concurrency=3)
        return [t.env_score for t in trajectories]

    with running_sandbox(suite_db, ports=sandbox_ports(suite_db)):
        scores = asyncio.run(run())
    assert scores == [1.0] * len(configs), list(zip([c.intent for c in configs], scores, strict=True))


def _miss_once(look: Callable[..., Any]) -> Callable[..., Any]:
    """``look`` that answers None once (a look taken before another copy of the job committed), then looks."""
    calls: list[int] = []

    def missed(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return None if len(calls) == 1 else look(*args, **kwargs)

    return missed


def _request_stored_twice(settings: Settings, monkeypatch: pytest.MonkeyPatch, *looks: str) -> None:
    """Two copies of one ``taskgen.generate`` job: the late one's ``looks`` missed the first one's batch, so it
    generates too. It gets the first's keys, no error, and stores nothing of its own."""
    from services.taskgen import curriculum
    from webrl.wire.contracts import GenerateRequest

    request = GenerateRequest(phase=1, parent_keys=_parents(settings, 2), n=8, seed=3)
    first = curriculum.generate(settings, request)
    for name in looks:
        monkeypatch.setattr(curriculum, name, _miss_once(getattr(curriculum, name)))
    again = curriculum.generate(settings, request)
    assert again.task_keys == first.task_keys and not again.rejected and again.duplicates == 0
    with session_scope(settings) as s:
        assert s.scalar(select(func.count()).select_from(m.GenerationRequest)) == 1
        assert sorted(t.key for t in repo.tasks_where(s, origin="generated")) == sorted(first.task_keys)


def test_a_copy_of_a_request_that_missed_the_stored_batch_returns_it(suite_db: Settings,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The late copy looked (``stored_generation``, its own transaction) before the first committed."""
    _request_stored_twice(suite_db, monkeypatch, "stored_generation")


@pytest.mark.postgres
def test_a_copy_that_loses_the_race_to_store_returns_the_winners_batch_on_postgres(
        free_sites: Settings, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both of the late copy's looks missed: its insert of the request's digest meets the first's committed row
    (an IntegrityError inside a savepoint), and it returns the first's batch."""
    from webrl.db.migrate import downgrade

    settings = free_sites.replace(database={"url": postgres_url})
    upgrade(settings)
    try:
        load_suite(settings, settings.seed)
        _request_stored_twice(settings, monkeypatch, "stored_generation", "_generation_row")
    finally:
        downgrade(settings)  # the session's Postgres database stays empty for the next test
