"""Celery: routing, eager mode, and a task through a real worker process on the local Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.queue import celery_app, configure, dispatch, route_for

pytestmark = pytest.mark.redis


def test_each_service_has_its_queue() -> None:
    assert route_for("rollout.run") == "rollout"
    assert route_for("orm.score") == "orm"
    assert route_for("train.phase") == "train"
    assert route_for("taskgen.generate") == "taskgen"
    assert route_for("unknown.thing") == "default"


def test_json_only_and_late_acks() -> None:
    conf = celery_app.conf
    assert conf.task_serializer == "json" and conf.accept_content == ["json"]
    assert conf.task_acks_late is True


def test_eager_dispatch_runs_in_process(settings: Settings) -> None:
    configure(settings)
    result = dispatch("webrl.ping", {"nonce": "abc"})
    assert result["pong"] == "abc"
    assert result["checks"]["database"] == "ok"


@pytest.fixture
def worker(redis_url: str, postgres_url: str, tmp_path: Path) -> Iterator[Settings]:
    broker = redis_url
    env = {**os.environ, "WEBRL_BROKER_URL": broker, "WEBRL_DATABASE_URL": postgres_url,
           "WEBRL_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webrl.queue", "worker", "-Q", "default", "--pool", "solo",
         "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    s = Settings(home=tmp_path, broker_url=broker, database_url=postgres_url, _env_file=None)
    configure(s)
    try:
        yield s
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        configure(Settings(home=tmp_path, _env_file=None))  # back to eager for other tests


def test_a_task_goes_through_a_real_worker_via_redis(worker: Settings) -> None:
    nonce = uuid.uuid4().hex
    start = time.monotonic()
    result = dispatch("webrl.ping", {"nonce": nonce}, timeout=60)
    assert result["pong"] == nonce
    assert result["checks"] == {"database": "ok", "broker": "ok"}
    assert result["worker"]  # answered by the worker process, which checked Postgres and Redis itself
    assert time.monotonic() - start < 60
