"""Celery: routing, eager mode, and a task through a real worker process on the local Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.wire.queue import QUEUES, DispatchTimeout, celery_app, configure, dispatch, route_for

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
    env = {**os.environ, "WEBRL_JOBS__BROKER_URL": broker, "WEBRL_DATABASE__URL": postgres_url,
           "WEBRL_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webrl.wire.queue", "worker", "-Q", "default", "--pool", "solo",
         "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    s = Settings(home=tmp_path, jobs={"broker_url": broker}, database={"url": postgres_url}, _env_file=None)
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


def test_limits_are_set_explicitly() -> None:
    settings = Settings(jobs={"time_limit_s": 100.0}, _env_file=None)
    assert settings.jobs.visibility_timeout_s == 700.0 and settings.jobs.dispatch_timeout_s == 800.0
    with pytest.raises(ValueError, match=r"visibility_timeout_s .* must exceed time_limit_s"):
        Settings(jobs={"time_limit_s": 100.0, "visibility_timeout_s": 50.0}, _env_file=None)
    configure(Settings(jobs={"time_limit_s": 100.0}, _env_file=None))
    try:
        conf = celery_app.conf
        assert conf.broker_transport_options["visibility_timeout"] == 700.0
        assert conf.task_time_limit == 100.0 and conf.task_soft_time_limit == 95.0
    finally:
        configure(Settings(_env_file=None))


#: The worker-kill test's limits: a 3 s job, killed mid-way, redelivered after 6 s without an ack.
JOB_S, TIME_LIMIT_S, VISIBILITY_S = 3.0, 4.0, 6.0


def _start_worker(env: dict[str, str], queue: str, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["nice", "-n", "19", sys.executable, "-m", "celery", "-A", "webrl.wire.queue", "worker", "-Q", queue,
         "-n", f"{name}@%h", "--pool", "prefork", "--concurrency", "1", "--include", "celery_slow_job",
         "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _wait_for(path: Path, count: int, procs: list[subprocess.Popen], what: str) -> list[str]:
    deadline = time.monotonic() + 300  # worker start-up imports every service (torch): slow on a busy CPU
    while len(names := sorted(p.name for p in path.iterdir())) < count:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), f"{what}: {names}"
        time.sleep(0.05)
    return names


def _killtest_world(redis_url: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    time_limit_s: float, visibility_s: float) -> tuple[str, Path, Path, dict[str, str]]:
    """A queue of its own on Redis db 14 (not the shared 15: a short visibility timeout would also redeliver other
    test runs' unacknowledged jobs), this process's Celery app pointed at it with these limits, and the environment
    its workers start with: (queue, started folder, ready folder, environment)."""
    broker = redis_url.rsplit("/", 1)[0] + "/14"
    queue = f"killtest-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(QUEUES, "killtest", queue)
    started, ready = tmp_path / "started", tmp_path / "ready"
    started.mkdir()
    ready.mkdir()
    env = {**os.environ, "WEBRL_JOBS__BROKER_URL": broker, "WEBRL_DATABASE__URL": postgres_url,
           "WEBRL_HOME": str(tmp_path), "WEBRL_JOBS__TIME_LIMIT_S": str(time_limit_s),
           "WEBRL_JOBS__VISIBILITY_TIMEOUT_S": str(visibility_s), "KILLTEST_READY_DIR": str(ready),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    configure(Settings(home=tmp_path, database={"url": postgres_url}, _env_file=None,
                       jobs={"broker_url": broker, "time_limit_s": time_limit_s, "visibility_timeout_s": visibility_s,
                             "dispatch_timeout_s": 600.0}))
    return queue, started, ready, env


def test_a_job_of_a_killed_worker_is_redelivered(redis_url: str, postgres_url: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL of a whole worker (its process group) mid-job: after the visibility timeout another worker
    runs the job again and dispatch gets its exact result."""
    queue, started, ready, env = _killtest_world(redis_url, postgres_url, tmp_path, monkeypatch, TIME_LIMIT_S,
                                                 VISIBILITY_S)
    first = _start_worker(env, queue, "first")
    second = _start_worker(env, f"{queue}-idle", "second")  # takes the queue over once the first is dead
    outcome: dict = {}
    payload = {"n": 1000, "seconds": JOB_S, "started_dir": str(started)}
    sender = threading.Thread(target=lambda: outcome.update(dispatch("killtest.sum", payload)))
    try:
        [_, second_name] = _wait_for(ready, 2, [first, second], "workers not ready")
        sender.start()
        [first_pid] = [int(name) for name in _wait_for(started, 1, [first], "the job never started")]
        os.killpg(first.pid, signal.SIGKILL)  # the whole worker: main process and its pool child
        killed_at = time.monotonic()
        first.wait(timeout=10)
        celery_app.control.add_consumer(queue, destination=[second_name], reply=True, timeout=30)
        sender.join(timeout=300)
        assert not sender.is_alive(), "no result: the job was not redelivered"
        assert outcome == {"sum": sum(range(1000)), "pid": outcome["pid"]} and outcome["pid"] != first_pid
        assert time.monotonic() - killed_at < VISIBILITY_S + JOB_S + 30  # the visibility timeout, not an hour
    finally:
        _stop(first)
        _stop(second)
        configure(Settings(home=tmp_path, _env_file=None))


def test_a_job_that_kills_every_worker_that_runs_it_stops_after_its_last_start(
        redis_url: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each start ends the pool process that runs it; the worker gives the job back (late acks, reject on a lost
    worker) and it starts again, MAX_STARTS times, then fails instead of looping, and dispatch says why."""
    from webrl.wire.queue import MAX_STARTS, JobStartedTooOften

    # the lost worker is noticed long before the job's time limit, as in real use
    queue, started, ready, env = _killtest_world(redis_url, postgres_url, tmp_path, monkeypatch, 60.0, 90.0)
    worker = _start_worker(env, queue, "victim")
    try:
        _wait_for(ready, 1, [worker], "worker not ready")
        with pytest.raises(Exception, match=f"started {MAX_STARTS + 1} times") as raised:
            dispatch("killtest.die", {"started_dir": str(started)}, timeout=300)
        assert type(raised.value).__name__ == JobStartedTooOften.__name__
        assert len(list(started.iterdir())) == MAX_STARTS  # the body ran MAX_STARTS times, then never again
        assert worker.poll() is None  # the worker itself lives on and serves other jobs
    finally:
        _stop(worker)
        configure(Settings(home=tmp_path, _env_file=None))


def _ended(pid: int) -> bool:
    """The process ``pid`` has exited (gone, or a zombie its parent has yet to reap)."""
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def test_ctrl_c_on_the_caller_stops_its_running_job_for_good(redis_url: str, postgres_url: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while ``webrl train`` waits on a job: the pool process running it ends at once (not at its end or time
    limit), the job is stored as revoked and never delivered again (a resumed run would otherwise compute the same
    chunk beside it), and the worker serves on."""
    from celery.result import AsyncResult

    job_s, time_limit_s, visibility_s = 28.0, 30.0, 35.0
    queue, started, ready, env = _killtest_world(redis_url, postgres_url, tmp_path, monkeypatch, time_limit_s,
                                                 visibility_s)
    worker = _start_worker(env, queue, "interrupted")
    caller = threading.get_ident()
    sent_ids: list[str] = []
    send_task = celery_app.send_task
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: sent_ids.append((r := send_task(*a, **k)).id) or r)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt_once_started() -> None:
        _wait_for(started, 1, [worker], "the job never started")
        signal.pthread_kill(caller, signal.SIGINT)

    try:
        _wait_for(ready, 1, [worker], "worker not ready")
        threading.Thread(target=interrupt_once_started, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            dispatch("killtest.sum", {"n": 10, "seconds": job_s, "started_dir": str(started)}, timeout=300)
        interrupted = time.monotonic()
        [pid] = [int(p.name) for p in started.iterdir()]
        while not _ended(pid):
            assert time.monotonic() - interrupted < job_s / 2, "the interrupted job's process still runs"
            time.sleep(0.1)
        assert AsyncResult(sent_ids[0], app=celery_app).state == "REVOKED"
        time.sleep(max(0.0, interrupted + visibility_s + 4 - time.monotonic()))  # past a redelivery without an ack
        assert [int(p.name) for p in started.iterdir()] == [pid]  # never started again
        after = dispatch("killtest.sum", {"n": 10, "seconds": 0.0, "started_dir": str(started)}, timeout=120)
        assert after["sum"] == 45
    finally:
        signal.signal(signal.SIGINT, previous)
        _stop(worker)
        configure(Settings(home=tmp_path, _env_file=None))


def test_dispatch_without_a_worker_times_out_clearly(redis_url: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(QUEUES, "nobody", queue)
    configure(Settings(home=tmp_path, jobs={"broker_url": redis_url, "dispatch_timeout_s": 1.0}, _env_file=None))
    try:
        start = time.monotonic()
        with pytest.raises(DispatchTimeout, match=f"no result within 1 s: is a worker consuming queue '{queue}'"):
            dispatch("nobody.work", {})
        assert time.monotonic() - start < 10
    finally:
        import redis

        redis.Redis.from_url(redis_url).delete(queue)
        configure(Settings(home=tmp_path, _env_file=None))


def test_a_submitted_job_is_followed_to_its_end_and_an_id_never_submitted_is_unknown(worker: Settings) -> None:
    """Distributed mode: the trainer's and the browser pool's job routes answer 404 for an id no one submitted
    (Celery alone answers PENDING for any id, so a mistyped id read "queued" forever), and follow a submitted one to
    its result."""
    from fastapi.testclient import TestClient

    from services.browser_pool.pool import BrowserPool
    from services.browser_pool.sessions import EpisodeManager
    from services.trainer.app import create_trainer_app
    from webrl.wire.queue import job_state, submit_job

    nonce = uuid.uuid4().hex
    job_id = submit_job("webrl.ping", {"nonce": nonce})
    deadline = time.monotonic() + 60
    while (known := job_state(job_id)) is not None and known.status != "succeeded":
        assert time.monotonic() < deadline, known
        time.sleep(0.1)
    assert known is not None and known.result["pong"] == nonce and known.error is None
    never = uuid.uuid4().hex
    assert job_state(never) is None
    trainer = TestClient(create_trainer_app(worker))
    assert trainer.get(f"/v1/train/{never}").status_code == 404
    reply = trainer.get(f"/v1/train/{job_id}")
    assert reply.status_code == 200 and reply.json()["status"] == "succeeded", reply.text
    pool = EpisodeManager(worker, BrowserPool(worker))
    assert asyncio.run(pool.job(never)) is None and asyncio.run(pool.job(job_id)).status == "succeeded"


def test_a_job_waiting_in_its_queue_is_waiting_in_each_services_word(redis_url: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    from services.browser_pool.pool import BrowserPool
    from services.browser_pool.sessions import EpisodeManager
    from services.trainer.app import create_trainer_app
    from webrl.wire.queue import JobState, job_state, submit_job

    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    monkeypatch.setitem(QUEUES, "nobody", queue)
    settings = Settings(home=tmp_path, jobs={"broker_url": redis_url}, _env_file=None)
    configure(settings)
    try:
        job_id = submit_job("nobody.work", {})
        assert job_state(job_id) == JobState("waiting")
        reply = TestClient(create_trainer_app(settings)).get(f"/v1/train/{job_id}")
        assert reply.status_code == 200 and reply.json()["status"] == "queued", reply.text
        assert asyncio.run(EpisodeManager(settings, BrowserPool(settings)).job(job_id)).status == "pending"
        celery_app.backend.mark_as_failure(job_id, ValueError("no such page"))
        assert job_state(job_id) == JobState("failed", error="ValueError: no such page")
        reply = TestClient(create_trainer_app(settings)).get(f"/v1/train/{job_id}")
        assert reply.json()["status"] == "failed" and reply.json()["error"] == "ValueError: no such page", reply.text
    finally:
        import redis

        redis.Redis.from_url(redis_url).delete(queue)
        configure(Settings(home=tmp_path, _env_file=None))


def test_the_pool_talks_to_the_broker_off_its_event_loop(redis_url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The browser pool's job routes submit to Redis and read its state in a worker thread: the client's calls block,
    and on the event loop they would stall every episode the service drives (a hung broker: all of them)."""
    from services.browser_pool.pool import BrowserPool
    from services.browser_pool.sessions import EpisodeManager
    from webrl.wire import queue as wire_queue
    from webrl.wire.contracts import RolloutRequest

    callers: list[threading.Thread] = []

    def seen(call):  # the real call, its thread noted
        def noted(*args, **kwargs):
            callers.append(threading.current_thread())
            return call(*args, **kwargs)
        return noted

    monkeypatch.setattr(wire_queue, "submit_job", seen(wire_queue.submit_job))
    monkeypatch.setattr(wire_queue, "job_state", seen(wire_queue.job_state))
    queue = f"nobody-{uuid.uuid4().hex[:8]}"  # a rollout queue no worker serves: the job waits
    monkeypatch.setitem(QUEUES, "rollout", queue)
    settings = Settings(home=tmp_path, jobs={"broker_url": redis_url}, _env_file=None)
    configure(settings)

    async def main() -> tuple[threading.Thread, str | None]:
        manager = EpisodeManager(settings, BrowserPool(settings))
        job = await manager.submit(RolloutRequest(task_keys=["k"], phase=0, policy={"kind": "oracle"}))
        view = await manager.job(job.job_id)
        return threading.current_thread(), view.status if view else None

    try:
        loop_thread, status = asyncio.run(main())
    finally:
        import redis

        redis.Redis.from_url(redis_url).delete(queue)
        configure(Settings(home=tmp_path, _env_file=None))
    assert status == "pending"
    assert len(callers) == 2 and loop_thread not in callers
