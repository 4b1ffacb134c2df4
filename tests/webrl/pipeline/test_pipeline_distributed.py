"""The smoke run in the distributed mode: every stage dispatched over Redis to a real Celery worker process
serving all the services' queues, data in a fresh PostgreSQL database, and every rollout step answered by a real
``uvicorn`` actor service, which hot-reloads each actor the trainer publishes before the next rollouts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from local_ports import free_port
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


@contextlib.contextmanager
def _running_actor_service(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """``uvicorn services.actor.app:app`` with ``env`` on a free port, until it answers ``GET /v1/model``; yields
    its base URL, stops it afterwards."""
    url = f"http://127.0.0.1:{free_port()}"
    log = log_path.open("w")
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "services.actor.app:app", "--host", "127.0.0.1",
                               "--port", url.rsplit(":", 1)[1], "--log-level", "warning"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + ACTOR_START_TIMEOUT_S
        while not _answers(f"{url}/v1/model"):
            assert server.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.5)
        yield url
    finally:
        _stop(server)
        log.close()


@pytest.fixture
def actor_service(request: pytest.FixtureRequest, world: Settings, redis_url: str, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The actor service, subscribed to the checkpoint events on Redis; ``WEBRL_ACTOR__URL`` names it for the
    pipeline and the workers. Yields its base URL. By default it serves the tiny SFT actor with its local backend;
    parametrised ``"vllm"`` (indirect), it is the openai backend in front of the session's vLLM, starting
    from the shipped SFT adapter, and the world's artifacts hold the SmolLM2 base vLLM serves (the trainer's LoRA
    updates train on it)."""
    env = {**os.environ, "WEBRL_JOBS__REDIS_URL": redis_url}
    if getattr(request, "param", "local") == "vllm":
        from webrl.demo import SHIPPED_ACTOR
        from webrl.models.pretrained_base import base_dir

        base = request.getfixturevalue("smollm2_base")
        link = base_dir(world, base.name)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(base, target_is_directory=True)
        env |= {"WEBRL_ACTOR__BACKEND": "openai", "WEBRL_ACTOR__ENDPOINT": request.getfixturevalue("vllm_server").url,
                "WEBRL_ACTOR__MODEL": str(SHIPPED_ACTOR)}
    else:
        env["WEBRL_ACTOR__MODEL"] = str(request.getfixturevalue("tiny_actor"))
    with _running_actor_service(env, tmp_path / "actor.log") as url:
        monkeypatch.setenv("WEBRL_ACTOR__URL", url)
        yield url


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


def _run_two_small_phases(settings: Settings, actor: Path, run: str, orm: str = "") -> list[m.Phase]:
    """The smoke preset cut to :data:`TWO_SMALL_PHASES` from ``actor``; rewards from ``orm`` ("" = the sandbox
    evaluators)."""
    from webrl.commands.train import ensure_ready
    from webrl.method.hyperparams import with_overrides
    from webrl.method.presets import PRESETS
    from webrl.orchestration.pipeline import Pipeline, PipelineOptions

    assert settings.rollouts_through_actor  # the distributed mode's default, nothing configured for it
    ensure_ready(settings)
    record = with_overrides(PRESETS["smoke"], TWO_SMALL_PHASES)
    Pipeline(settings, PipelineOptions(run=run, actor=str(actor), orm=orm,
                                       hyperparams=record)).run()
    with session_scope(settings) as s:
        phases = s.scalars(select(m.Phase).order_by(m.Phase.index)).all()
        s.expunge_all()
    assert [(p.index, p.status) for p in phases] == [(0, "done"), (1, "done"), (2, "done")]
    return phases


def _assert_each_phase_rolled_out_the_actor_before_it(settings: Settings, sft: str,
                                                       phases: list[m.Phase]) -> tuple[str, str]:
    """Each trajectory records the version the actor service answered with: phase i+1 rolls out phase i's actor,
    and each phase's evaluation runs the actor that phase trained. Returns the two phases' actor versions."""
    first, second = (p.state["actor_version"] for p in phases[1:])
    assert len({sft, first, second}) == 3
    versions: dict[tuple[int, str], set[str]] = {}
    with session_scope(settings) as s:
        for phase, purpose, version in s.execute(select(m.TrajectoryRow.phase, m.TrajectoryRow.purpose,
                                                        m.TrajectoryRow.actor_version)):
            versions.setdefault((phase, purpose), set()).add(version)
    assert versions == {(0, "eval"): {sft}, (0, "train"): {sft}, (1, "train"): {sft}, (1, "eval"): {first},
                        (2, "train"): {first}, (2, "eval"): {second}}
    assert phases[2].metrics["rollout.actor_versions"] == [first]
    return first, second


@pytest.mark.timeout(1500)  # bootstrap, three processes starting, two trainings: a busy 2-core box needs it
def test_two_phases_roll_out_through_the_actor_service(distributed: Settings, tiny_actor: Path,
                                                         actor_service: str) -> None:
    from webrl.models.loading import checkpoint_version

    phases = _run_two_small_phases(distributed, tiny_actor, "dist", orm=str(tiny_actor))
    with session_scope(distributed) as s:
        assert distributed.database.url.startswith("postgresql")
        assert s.scalar(select(func.count()).select_from(m.Checkpoint)) == 4  # an actor and a critic a phase
        kept = [p.metrics["filter.kept"] for p in phases[1:]]
        assert kept == [2, 2]
        assert s.scalar(select(func.count()).select_from(m.TrajectoryRow)) == 3 * 2 + 2 + sum(kept)
        assert s.scalar(select(func.count()).select_from(m.OrmLabel)) == 2 + sum(kept)
        steps = s.scalar(select(func.sum(m.TrajectoryRow.n_steps)))
    sft = checkpoint_version(tiny_actor)
    _, second = _assert_each_phase_rolled_out_the_actor_before_it(distributed, sft, phases)
    served = httpx.get(f"{actor_service}/v1/model", timeout=10).json()
    assert served["version"] == second and served["reloads"] == 2 and served["reload_error"] is None
    # every step went to the service: one POST /v1/act per batch of at most `concurrency` (2) episodes' steps
    assert steps / 2 <= _acts_answered(actor_service) <= steps

    # `webrl eval` of the SFT actor takes the same path: the service goes back to it, and answers every step
    from webrl.orchestration.evaluate import EVAL_PHASE, evaluate_actor

    acts = _acts_answered(actor_service)
    assert evaluate_actor(distributed, tiny_actor, limit=2, max_steps=2)["overall"][0] == 2
    with session_scope(distributed) as s:
        evaluated = set(s.scalars(select(m.TrajectoryRow.actor_version).where(
            m.TrajectoryRow.phase == EVAL_PHASE, m.TrajectoryRow.attempt > 0)))
    assert evaluated == {sft}
    served = httpx.get(f"{actor_service}/v1/model", timeout=10).json()
    assert served["version"] == sft and served["reloads"] == 3
    assert _acts_answered(actor_service) > acts


def _adapters_in_vllm(url: str) -> dict[str, str]:
    """The adapters vLLM holds: name -> folder (its ``GET /v1/models`` entries with a parent, i.e. not the base)."""
    return {e["id"]: e["root"] for e in httpx.get(f"{url}/v1/models", timeout=10).json()["data"] if e.get("parent")}


@pytest.mark.vllm
@pytest.mark.parametrize("actor_service", ["vllm"], indirect=True)
@pytest.mark.timeout(2400)  # vLLM and SmolLM2 LoRA training on a 2-core CPU
def test_vllm_answers_phase_two_with_the_adapter_phase_one_published(distributed: Settings, actor_service: str,
                                                                     vllm_server) -> None:
    """The distributed smoke run with the shipped SFT adapter as its actor, every step answered by a real vLLM
    behind the actor service: each phase's LoRA update is hot-loaded into the running server under its version
    (no restart), phase 2's rollouts are answered by the adapter phase 1 published, adapters no rollout uses are
    unloaded; then ``webrl eval`` of the SFT adapter on three test tasks takes the same path."""
    from typer.testing import CliRunner

    from webrl.cli import app
    from webrl.demo import SHIPPED_ACTOR
    from webrl.models.loading import checkpoint_version
    from webrl.orchestration.evaluate import EVAL_PHASE

    pid = vllm_server.process.pid
    phases = _run_two_small_phases(distributed, SHIPPED_ACTOR, "vllm")
    sft = checkpoint_version(SHIPPED_ACTOR)
    first, second = _assert_each_phase_rolled_out_the_actor_before_it(distributed, sft, phases)
    with session_scope(distributed) as s:
        rolled = s.scalars(select(m.StepRow).join(m.TrajectoryRow).where(m.TrajectoryRow.phase == 2,
                                                                   m.TrajectoryRow.purpose == "train")).all()
        assert rolled and all(step.token_ids and len(step.logprobs) == len(step.token_ids) for step in rolled)
    served = httpx.get(f"{actor_service}/v1/model", timeout=10).json()
    assert (served["backend"], served["version"], served["reloads"], served["reload_error"]) == (
        "openai", second, 2, None)
    held = _adapters_in_vllm(vllm_server.url)
    assert Path(held[second]).resolve() == Path(phases[2].state["actor_path"]).resolve()
    assert first not in held  # no rollout uses phase 1's adapter any more
    assert vllm_server.process.poll() is None and vllm_server.process.pid == pid  # hot-loaded, never restarted

    acts = _acts_answered(actor_service)
    result = CliRunner().invoke(app, ["eval", "--actor", str(SHIPPED_ACTOR), "--limit", "3", "--max-steps", "3",
                                      "--concurrency", "3", "--no-screenshots"])
    assert result.exit_code == 0, result.output + repr(result.exception)
    with session_scope(distributed) as s:
        evaluated = s.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.phase == EVAL_PHASE,
                                                         m.TrajectoryRow.attempt > 0)).all()
        assert len(evaluated) == 3 and {t.actor_version for t in evaluated} == {sft}
        steps = [step for t in evaluated for step in t.steps]
        assert steps and all(step.logprobs for step in steps)
        # the SFT adapter answered in its action format, not the bare base; bf16 rounding may cost one step
        assert sum(step.parse_error is None for step in steps) >= len(steps) - 1
    served = httpx.get(f"{actor_service}/v1/model", timeout=10).json()
    assert served["version"] == sft and served["reloads"] == 3
    assert _acts_answered(actor_service) > acts
