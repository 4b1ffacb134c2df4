"""The smoke run in the distributed mode: every stage dispatched over Redis to a real Celery worker process
serving all the services' queues, data in a fresh PostgreSQL database, and every rollout step answered by a real
``uvicorn`` actor service, which hot-reloads each actor the trainer publishes before the next rollouts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from webrl.config import Settings, get_settings
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.wire.queue import configure

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]
QUEUES = "rollout,actor,orm,critic,taskgen,train,default"
ACTOR_START_TIMEOUT_S = 300  # uvicorn imports torch and transformers and loads the actor; slow on a busy 2-core box


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM; SIGKILL if it is still running 30 s later."""
    process.terminate()
    deadline = time.monotonic() + 30
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if process.poll() is None:
        process.kill()
        process.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def actor_service(world: Settings, tiny_actor: Path, redis_url: str, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``uvicorn services.actor.app:app`` serving the tiny SFT actor, subscribed to the checkpoint events on Redis;
    ``WEBRL_ACTOR__URL`` names it for the pipeline and the workers. Yields its base URL."""
    url = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("WEBRL_ACTOR__URL", url)
    env = {**os.environ, "WEBRL_ACTOR__MODEL": str(tiny_actor), "WEBRL_JOBS__REDIS_URL": redis_url}
    log = (tmp_path / "actor.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "services.actor.app:app", "--host", "127.0.0.1",
                               "--port", url.rsplit(":", 1)[1], "--log-level", "warning"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + ACTOR_START_TIMEOUT_S
        while not _answers(f"{url}/v1/model"):
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "actor.log").read_text()
            time.sleep(0.5)
        yield url
    finally:
        _stop(server)
        log.close()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def distributed(world: Settings, postgres_url: str, redis_url: str, actor_service: str, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    broker = redis_url.rsplit("/", 1)[0] + "/14"
    monkeypatch.setenv("WEBRL_DATABASE__URL", postgres_url)
    monkeypatch.setenv("WEBRL_JOBS__BROKER_URL", broker)
    get_settings.cache_clear()
    settings = get_settings()
    from webrl.db.migrate import downgrade, upgrade

    downgrade(settings)  # the session's database may hold other tests' rows: start empty
    upgrade(settings)
    import redis

    redis.Redis.from_url(broker).flushdb()
    worker_log = (tmp_path / "worker.log").open("w")  # a file, never a pipe a chatty worker could fill
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webrl.wire.queue", "worker", "-Q", QUEUES, "--pool", "solo",
         "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        env=dict(os.environ), stdout=worker_log, stderr=subprocess.STDOUT)
    configure(settings)
    from webrl.sandbox.server import running_sandbox, sandbox_ports

    try:
        with running_sandbox(settings, ports=sandbox_ports(settings)):  # the sites a deployment would serve
            yield settings
    finally:
        _stop(worker)
        worker_log.close()
        monkeypatch.delenv("WEBRL_JOBS__BROKER_URL")
        get_settings.cache_clear()
        configure(get_settings())


def _acts_answered(actor_url: str) -> int:
    """``POST /v1/act`` requests the actor service answered with 200 (its Prometheus counter)."""
    families = text_string_to_metric_families(httpx.get(f"{actor_url}/metrics", timeout=10).text)
    return int(sum(sample.value for family in families if family.name == "webrl_http_requests"
                   for sample in family.samples
                   if sample.name.endswith("_total") and sample.labels.get("route") == "/v1/act"
                   and sample.labels.get("status") == "200"))


#: The smoke preset cut to two tasks a stage and two steps an episode: two phases stay a few minutes.
TWO_SMALL_PHASES = {"curriculum.phases": 2, "curriculum.tasks_per_phase": 2, "curriculum.candidates_per_phase": 4,
                    "curriculum.seed_tasks": 2, "evaluation.tasks": 2, "rollout.max_steps": 2, "rollout.chunk": 2}


@pytest.mark.timeout(1500)  # bootstrap, three processes starting, two trainings: a busy 2-core box needs it
def test_two_phases_roll_out_through_the_actor_service(distributed: Settings, tiny_actor: Path,
                                                         actor_service: str) -> None:
    from webrl.commands.train import ensure_ready
    from webrl.method.hyperparams import with_overrides
    from webrl.method.presets import PRESETS
    from webrl.models.loading import checkpoint_version
    from webrl.orchestration.pipeline import Pipeline, PipelineOptions

    assert distributed.rollouts_through_actor  # the distributed mode's default, nothing configured for it
    ensure_ready(distributed)
    record = with_overrides(PRESETS["smoke"], TWO_SMALL_PHASES)
    Pipeline(distributed, PipelineOptions(run="dist", actor=str(tiny_actor), orm=str(tiny_actor),
                                          hyperparams=record)).run()
    with session_scope(distributed) as s:
        assert distributed.database.url.startswith("postgresql")
        phases = s.scalars(select(m.Phase).order_by(m.Phase.index)).all()
        assert [(p.index, p.status) for p in phases] == [(0, "done"), (1, "done"), (2, "done")]
        assert s.scalar(select(func.count()).select_from(m.Checkpoint)) == 4  # an actor and a critic a phase
        kept = [p.metrics["filter.kept"] for p in phases[1:]]
        assert kept == [2, 2]
        assert s.scalar(select(func.count()).select_from(m.Trajectory)) == 3 * 2 + 2 + sum(kept)
        assert s.scalar(select(func.count()).select_from(m.OrmLabel)) == 2 + sum(kept)
        versions: dict[tuple[int, str], set[str]] = {}
        for phase, purpose, version in s.execute(select(m.Trajectory.phase, m.Trajectory.purpose,
                                                        m.Trajectory.actor_version)):
            versions.setdefault((phase, purpose), set()).add(version)
        steps = s.scalar(select(func.sum(m.Trajectory.n_steps)))
    sft = checkpoint_version(tiny_actor)
    first, second = (p.state["actor_version"] for p in phases[1:])
    assert len({sft, first, second}) == 3
    # each trajectory records the version the actor service answered with: phase i+1 rolls out phase i's actor,
    # and each phase's evaluation runs the actor that phase trained
    assert versions == {(0, "eval"): {sft}, (0, "train"): {sft}, (1, "train"): {sft}, (1, "eval"): {first},
                        (2, "train"): {first}, (2, "eval"): {second}}
    assert phases[2].metrics["rollout.actor_versions"] == [first]
    served = httpx.get(f"{actor_service}/v1/model", timeout=10).json()
    assert served["version"] == second and served["reloads"] == 2 and served["reload_error"] is None
    # every step went to the service: one POST /v1/act per batch of at most `concurrency` (2) episodes' steps
    assert steps / 2 <= _acts_answered(actor_service) <= steps

    # `webrl eval` of the SFT actor takes the same path: the service goes back to it, and answers every step
    from webrl.orchestration.evaluate import EVAL_PHASE, evaluate_actor

    acts = _acts_answered(actor_service)
    assert evaluate_actor(distributed, tiny_actor, limit=2, max_steps=2)["overall"][0] == 2
    with session_scope(distributed) as s:
        evaluated = set(s.scalars(select(m.Trajectory.actor_version).where(
            m.Trajectory.phase == EVAL_PHASE, m.Trajectory.attempt > 0)))
    assert evaluated == {sft}
    served = httpx.get(f"{actor_service}/v1/model", timeout=10).json()
    assert served["version"] == sft and served["reloads"] == 3
    assert _acts_answered(actor_service) > acts
