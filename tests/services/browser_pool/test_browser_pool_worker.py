"""rollout.run: through a real Celery worker process on Redis, trajectories land in PostgreSQL; re-running
stores nothing twice; unknown task keys fail with a clear error. And the oracle end to end in-process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from services.browser_pool.pool import BrowserPool
from services.browser_pool.runs import run_batch
from webrl.config import SITE_PLACEHOLDERS, Settings

REPO = Path(__file__).resolve().parents[3]
WORKER_START_TIMEOUT_S = 300  # the worker imports every service's worker (torch too); slow on a busy 2-core box
ROLLOUT_TIMEOUT_S = 240
CELERY_REDIS_DB = 11  # a database of its own, so other test sessions' queues never meet this one


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.asyncio(loop_scope="session")
async def test_oracle_end_to_end(sandbox, sandbox_tasks):
    """run_batch with the oracle on held-out sandbox tasks: every episode exits and its evaluator gives 1."""
    from webrl.sandbox.oracles import OraclePolicy

    async with BrowserPool(sandbox, size=2) as pool:
        trajs = await run_batch(sandbox_tasks, OraclePolicy(), pool, sandbox, concurrency=2)
    assert [t.stop_reason for t in trajs] == ["exit"] * len(sandbox_tasks)
    assert [t.env_score for t in trajs] == [1.0] * len(sandbox_tasks)
    assert all(t.steps[-1].done and t.last_observation for t in trajs)


def _worker_env(sandbox: Settings, database_url: str, broker: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBRL_")}
    env.update({"WEBRL_JOBS__BROKER_URL": broker, "WEBRL_DATABASE__URL": database_url, "WEBRL_HOME": str(home),
                "PYTHONPATH": str(REPO)})
    for site in SITE_PLACEHOLDERS:
        env[f"WEBRL_SITES__{site.upper()}_URL"] = sandbox.site_url(site)
    return env


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.postgres
@pytest.mark.redis
def test_celery_rollout_writes_postgres(sandbox, sandbox_tasks, stored_keys, postgres_url, redis_url, tmp_path):
    from celery import Celery

    from webrl.db import models as m
    from webrl.db import repository
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope

    broker = redis_url.rsplit("/", 1)[0] + f"/{CELERY_REDIS_DB}"
    pg = Settings(home=tmp_path, database={"url": postgres_url})
    upgrade(pg)
    prefix = f"celery-{uuid.uuid4().hex[:6]}"
    keys = stored_keys(pg, sandbox_tasks[:2], prefix=prefix)
    log_path = tmp_path / "worker.log"
    log_file = log_path.open("w")  # a file, not a pipe: a chatty worker must never block on a full pipe
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webrl.wire.queue", "worker", "-Q", "rollout", "--pool", "solo",
         "--concurrency", "1", "--loglevel", "INFO", "-n", f"bp-{prefix}@%h"],
        cwd=REPO, env=_worker_env(sandbox, postgres_url, broker, tmp_path), stdout=log_file,
        stderr=subprocess.STDOUT, text=True)
    client = Celery("bp-test", broker=broker, backend=broker)
    client.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
    try:
        assert _wait_ready(client, worker, log_path), "worker never answered a ping"
        payload = {"task_keys": keys, "phase": 1, "attempt": 0, "purpose": "train",
                   "policy": {"kind": "oracle", "corrupt": 0.0, "seed": 0}, "concurrency": 2}
        result = client.send_task("rollout.run", args=(payload,), queue="rollout").get(timeout=ROLLOUT_TIMEOUT_S)
        assert len(result["trajectory_ids"]) == 2 and result["mean_env_score"] == 1.0 and result["n_new"] == 2
        again = client.send_task("rollout.run", args=(payload,), queue="rollout").get(timeout=ROLLOUT_TIMEOUT_S)
        assert again["trajectory_ids"] == result["trajectory_ids"] and again["n_new"] == 0
        bad = client.send_task("rollout.run", args=({**payload, "task_keys": ["no/such/task"]},), queue="rollout")
        with pytest.raises(Exception, match="unknown task keys"):
            bad.get(timeout=ROLLOUT_TIMEOUT_S)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log_file.close()
    output = log_path.read_text()
    with session_scope(pg) as session:
        rows = [session.get(m.TrajectoryRow, i) for i in result["trajectory_ids"]]
        assert all(r is not None and r.phase == 1 and r.env_score == 1.0 and len(r.steps) == r.n_steps > 0
                   for r in rows), output[-3000:]
        assert rows[0].steps[0].observation["html"].startswith("<html>")
        assert {r.task.key for r in rows} == set(keys)
        assert len(repository.trajectories_for_phase(session, 1, run_id=m.NO_RUN)) == 2


def _wait_ready(client, worker: subprocess.Popen, log_path: Path) -> bool:
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise AssertionError(f"worker exited: {log_path.read_text()[-3000:]}")
        if client.control.ping(timeout=1.0):
            return True
    return False
