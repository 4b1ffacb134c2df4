"""The distributed stack, started as local processes with the commands and environment docker-compose.yml
gives its containers (tests/deploy/compose_lite.py derives them from the file, so the two cannot drift),
against the local PostgreSQL (a fresh database) and Redis (a database number of its own); then one agent run
through REST: ``POST /v1/agent/run`` on the actor, which drives a real Chromium in the browser pool service
on the sandbox sites.

What differs from compose, and only that: compose DNS names and ports become 127.0.0.1 and free ports,
container paths move under a temporary home (where a freshly built tiny model stands in for the SFT actor
that ``webrl bootstrap`` writes), and the sandbox sites move to free ports through their ``WEBRL_SITES__<SITE>_URL``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from compose_lite import LocalPlan, LocalProcess, load, local_processes
from local_ports import free_offset, free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
REDIS_DB = 12  # this test's own Redis database number (conftest's redis_url uses 15)
READY_TIMEOUT_S = 240.0  # 14 Python processes importing torch and transformers on a busy 2-core machine
RUN_TIMEOUT_S = 300.0
MAX_STEPS = 3
BASE_ENV_VARS = ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")  # what a container has besides its environment

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis, pytest.mark.browser]


def _missing_entry_points(plan: LocalPlan) -> list[str]:
    """Modules the compose commands name that are not in the tree yet (uvicorn apps and Celery workers)."""
    missing = []
    for proc in plan.processes:
        target = next((p for p in proc.command if p.startswith("services.")), None)
        if target and importlib.util.find_spec(target.split(":")[0]) is None:
            missing.append(target)
    return missing


def _environment(proc: LocalProcess, extra: dict[str, str]) -> dict[str, str]:
    env = {k: os.environ[k] for k in BASE_ENV_VARS if k in os.environ}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    env.update(proc.env)
    env.update(extra)
    return env


class Stack:
    """Runs a :class:`LocalPlan`: jobs to completion, then every process, each with its own log file."""

    def __init__(self, plan: LocalPlan, extra_env: dict[str, str], workdir: Path) -> None:
        self.plan, self.extra_env, self.workdir = plan, extra_env, workdir
        self.running: dict[str, subprocess.Popen] = {}

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def tail(self, name: str, chars: int = 3000) -> str:
        path = self.log(name)
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"

    def run_jobs(self) -> None:
        for job in self.plan.jobs:
            result = subprocess.run(job.command, env=_environment(job, self.extra_env), cwd=self.workdir,
                                    capture_output=True, text=True, timeout=300)
            assert result.returncode == 0, f"{job.name} failed:\n{result.stdout}\n{result.stderr}"

    def start(self) -> None:
        for proc in self.plan.processes:
            with self.log(proc.name).open("w") as log:
                self.running[proc.name] = subprocess.Popen(
                    proc.command, env=_environment(proc, self.extra_env), cwd=self.workdir, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True)

    def assert_alive(self) -> None:
        for name, popen in self.running.items():
            assert popen.poll() is None, f"{name} exited with {popen.returncode}:\n{self.tail(name)}"

    def stop(self) -> None:
        for popen in self.running.values():
            if popen.poll() is None:
                popen.terminate()
        deadline = time.monotonic() + 30
        for popen in self.running.values():
            try:
                popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()


def _site_urls(plan: LocalPlan) -> dict[str, str]:
    """The sandbox site URLs every process was given (``WEBRL_SITES__<SITE>_URL``)."""
    from webrl.config import SITE_PLACEHOLDERS, env_name

    env = next(p.env for p in plan.processes if p.name == "sites")
    names = {s: env_name("sites", f"{s}_url") for s in SITE_PLACEHOLDERS}
    return {s: env[name] for s, name in names.items() if name in env}


def _wait_ready(stack: Stack, broker_url: str) -> None:
    """Every site answers, every API answers /readyz 200, and every worker's queue has a consumer."""
    from celery import Celery

    apis = {p.name: f"http://127.0.0.1:{p.port}/readyz" for p in stack.plan.processes if p.port}
    apis.update({f"site {site}": f"{url}/" for site, url in _site_urls(stack.plan).items()})
    queues = {p.command[p.command.index("-Q") + 1] for p in stack.plan.processes if "-Q" in p.command}
    probe = Celery(broker=broker_url)
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending_apis, pending_queues = dict(apis), set(queues)
    while pending_apis or pending_queues:
        assert time.monotonic() < deadline, f"not ready: APIs {sorted(pending_apis)}, queues {sorted(pending_queues)}"
        stack.assert_alive()
        for name, url in list(pending_apis.items()):
            try:
                if httpx.get(url, timeout=5).status_code < 500:
                    del pending_apis[name]
            except httpx.HTTPError:
                pass
        if pending_queues:
            active = probe.control.inspect(timeout=2).active_queues() or {}
            pending_queues -= {q["name"] for consumers in active.values() for q in consumers}
        time.sleep(1.0)


@pytest.fixture
def stack(postgres_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[Stack, LocalPlan]]:
    if shutil.which("chromium", path="/usr/bin") is None:
        pytest.fail("Debian's chromium (/usr/bin/chromium) is required by the browser pool")
    import redis

    broker_url = redis_url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
    redis.Redis.from_url(broker_url).flushdb()  # no queued messages left from an earlier run
    home = tmp_path / "home"
    plan = local_processes(load(), database_url=postgres_url, broker_url=broker_url, home=home,
                           free_port=free_port, free_offset=free_offset)
    missing = _missing_entry_points(plan)
    if missing:
        pytest.skip(f"services not landed yet: {missing}")

    from webrl.models.tiny import build_tiny_folder

    actor_model = next(p for p in plan.processes if p.name == "actor").env["WEBRL_ACTOR__MODEL"]
    assert actor_model.startswith(str(home)), actor_model  # compose's path, moved under this run's home
    # What `webrl bootstrap` would leave there; random weights are enough to drive an episode.
    build_tiny_folder(["Show me the products", 'do(action="Click", element="3")'] * 20, actor_model,
                      size="test", vocab_size=600, seed=0)
    workdir = tmp_path / "run"  # no .env here: only the environment below reaches the processes
    workdir.mkdir()
    stack = Stack(plan, {}, workdir)
    stack.run_jobs()
    stack.start()
    try:
        _wait_ready(stack, broker_url)
        yield stack, plan
    finally:
        stack.stop()


def test_compose_stack_runs_an_agent_episode_through_rest(stack: tuple[Stack, LocalPlan]) -> None:
    running, plan = stack
    actor = next(p for p in plan.processes if p.name == "actor")
    shopping = actor.env["WEBRL_SITES__SHOPPING_URL"]
    body = {"intent": "Show me the products in the Electronics category", "start_url": f"{shopping}/",
            "max_steps": MAX_STEPS, "evaluate": False}
    auth = {"Authorization": f"Bearer {actor.env['WEBRL_SECURITY__API_KEY']}"}
    response = httpx.post(f"http://127.0.0.1:{actor.port}/v1/agent/run", json=body, headers=auth,
                          timeout=RUN_TIMEOUT_S)
    assert response.status_code == 200, f"{response.text}\n--- actor log\n{running.tail('actor')}"
    result = response.json()
    steps = result["trajectory"]["steps"]
    assert 1 <= len(steps) <= MAX_STEPS
    assert steps[0]["observation"]["url"].startswith(shopping), steps[0]["observation"]["url"]
    assert result["version"]

    bad = httpx.post(f"http://127.0.0.1:{actor.port}/v1/agent/run",
                     json={**body, "start_url": "http://example.com/"}, headers=auth, timeout=60)
    assert bad.status_code == 422 and "start_url" in bad.text  # the browser allow-list holds
    running.assert_alive()
