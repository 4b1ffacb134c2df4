"""The same smoke run in the distributed mode: every stage dispatched over Redis to a real Celery worker
process serving all the services' queues, data in a fresh PostgreSQL database."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from webrl.config import Settings, get_settings
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.queue import configure

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]
QUEUES = "rollout,actor,orm,critic,taskgen,train,default"


@pytest.fixture
def distributed(world: Settings, postgres_url: str, redis_url: str,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    broker = redis_url.rsplit("/", 1)[0] + "/14"
    monkeypatch.setenv("WEBRL_DATABASE_URL", postgres_url)
    monkeypatch.setenv("WEBRL_BROKER_URL", broker)
    get_settings.cache_clear()
    settings = get_settings()
    from webrl.db.migrate import downgrade, upgrade

    downgrade(settings)  # the session's database may hold other tests' rows: start empty
    upgrade(settings)
    import redis

    redis.Redis.from_url(broker).flushdb()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webrl.queue", "worker", "-Q", QUEUES, "--pool", "solo",
         "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    configure(settings)
    from webrl.sandbox.server import running_sandbox, sandbox_ports

    try:
        with running_sandbox(settings, ports=sandbox_ports(settings)):  # the sites a deployment would serve
            yield settings
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        monkeypatch.delenv("WEBRL_BROKER_URL")
        get_settings.cache_clear()
        configure(get_settings())


def test_smoke_run_through_celery_workers_redis_and_postgres(distributed: Settings, tiny_actor: Path) -> None:
    from webrl.cli import app

    result = CliRunner().invoke(app, ["train", "--preset", "smoke", "--run", "dist", "--actor", str(tiny_actor),
                                      "--orm", str(tiny_actor)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    with session_scope(distributed) as s:
        assert distributed.database_url.startswith("postgresql")
        phases = s.scalars(select(m.Phase).order_by(m.Phase.index)).all()
        assert [(p.index, p.status) for p in phases] == [(0, "done"), (1, "done")]
        assert s.scalar(select(func.count()).select_from(m.Checkpoint)) == 2
        assert s.scalar(select(func.count()).select_from(m.OrmLabel)) >= 16
        kept = phases[1].metrics["filter.kept"]
        assert s.scalar(select(func.count()).select_from(m.Trajectory)) == 8 + 8 + kept + 8
