"""docker/healthcheck.py (the images' HEALTHCHECK and the compose/k8s worker probes) against real peers: a
webrl service app, a TCP listener, and a Celery worker on the local Redis."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from local_ports import free_port

from webrl.config import Settings

ROOT = Path(__file__).resolve().parents[2]
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
sys.path.insert(0, str(HEALTHCHECK.parent))
import healthcheck  # noqa: E402

WAIT_S = 30.0
CELERY_WAIT_S = 120.0  # a worker starting on a loaded 2-core machine


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=60,
                          env=env)


@pytest.fixture
def service_url(settings: Settings) -> Iterator[str]:
    from webrl.serving.factory import create_app

    server = uvicorn.Server(uvicorn.Config(create_app("probe", settings=settings), host="127.0.0.1", port=0,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)


def test_http_check_passes_on_healthz_and_fails_on_errors(service_url: str) -> None:
    assert _run("http", f"{service_url}/healthz").returncode == 0
    missing = _run("http", f"{service_url}/nope")
    assert missing.returncode == 1 and "404" in missing.stderr
    closed = _run("http", f"http://127.0.0.1:{free_port()}/healthz")
    assert closed.returncode == 1 and "unreachable" in closed.stderr


def test_tcp_check_needs_every_address() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        open_addr = f"127.0.0.1:{listener.getsockname()[1]}"
        assert _run("tcp", open_addr).returncode == 0
        result = _run("tcp", open_addr, f"127.0.0.1:{free_port()}")
        assert result.returncode == 1 and "refused" in result.stderr


def test_bad_usage_is_reported() -> None:
    result = _run("smtp", "x")
    assert result.returncode == 1 and "usage" in result.stderr


def test_detect_reads_the_container_command() -> None:
    detect = healthcheck.detect
    assert detect([["/opt/venv/bin/python", "/opt/venv/bin/uvicorn", "services.orm.app:app", "--host", "0.0.0.0",
                    "--port", "8103"]]) == ["http", "http://127.0.0.1:8103/healthz"]
    assert detect([["/sbin/docker-init", "--", "celery"], ["/opt/venv/bin/python", "/opt/venv/bin/celery", "-A",
                    "services.orm.worker", "worker", "-Q", "orm", "-n", "orm@x"]]) == ["celery", "orm@x"]
    assert detect([["celery", "-A", "services.orm.worker", "worker", "-n", "orm-worker@%h"]]) == [
        "celery", f"orm-worker@{socket.gethostname()}"]
    assert detect([["celery", "-A", "services.orm.worker", "worker"]]) == ["celery"]
    from webrl.config import SANDBOX_PORTS
    from webrl.sandbox.sites import SITES

    sites = detect([["/opt/venv/bin/python", "/opt/venv/bin/webrl", "sites", "serve"]])
    assert sites == ["tcp", *(f"127.0.0.1:{SANDBOX_PORTS[s]}" for s in SITES)]
    assert detect([["webrl", "sites", "serve", "--port-offset", "5", "--site", "reddit"]]) == [
        "tcp", f"127.0.0.1:{SANDBOX_PORTS['reddit'] + 5}"]
    assert detect([["webrl", "browser", "serve", "--host", "0.0.0.0"]]) == ["tcp", "127.0.0.1:9230"]
    assert detect([["webrl", "browser", "serve", "--port", "9300"]]) == ["tcp", "127.0.0.1:9300"]
    assert detect([["webrl", "ui", "--host", "0.0.0.0"]]) == ["http", "http://127.0.0.1:8107/healthz"]
    assert detect([["/opt/venv/bin/webrl", "ui", "--port", "9107"]]) == ["http", "http://127.0.0.1:9107/healthz"]
    assert detect([["sleep", "10"]]) is None


def test_sites_are_probed_where_their_configured_urls_say(monkeypatch) -> None:
    from webrl.config import get_settings

    monkeypatch.setenv("WEBRL_SITES__REDDIT_URL", "http://127.0.0.1:19999")
    get_settings.cache_clear()
    try:
        assert healthcheck.detect([["webrl", "sites", "serve", "--site", "reddit"]]) == ["tcp", "127.0.0.1:19999"]
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_process_table_lists_this_process() -> None:
    commands = healthcheck.process_commands()
    assert any(argv[0] == sys.executable or Path(argv[0]).name.startswith("python") for argv in commands)


BARE_WORKER_APP = """\
import os
from celery import Celery
app = Celery("probe", broker=os.environ["WEBRL_JOBS__BROKER_URL"])
"""


@pytest.mark.redis
def test_celery_check_pings_a_running_worker(redis_url: str, tmp_path: Path) -> None:
    # A bare Celery app on the same broker starts in seconds; webrl's own workers (which import every service's
    # tasks first) answer the same remote-control ping, as the slow stack test shows.
    (tmp_path / "probe_app.py").write_text(BARE_WORKER_APP)
    name = f"healthcheck-{uuid.uuid4().hex[:8]}"
    node = f"{name}@{socket.gethostname()}"  # what celery makes of `-n NAME@%h`, as compose and k8s pass it
    env = {**os.environ, "WEBRL_JOBS__BROKER_URL": redis_url, "WEBRL_HOME": str(tmp_path)}
    env.pop("WEBRL_DATABASE__URL", None)
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "probe_app", "worker", "-Q",
                               f"hc-{uuid.uuid4().hex[:8]}", "-n", f"{name}@%h", "--pool", "solo",
                               "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel", "WARNING"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        deadline = time.monotonic() + CELERY_WAIT_S
        result = _run("celery", node, env=env)
        while result.returncode != 0 and time.monotonic() < deadline:
            assert worker.poll() is None, "the probe worker exited"
            time.sleep(0.5)
            result = _run("celery", node, env=env)
        assert result.returncode == 0, result.stderr
        other = _run("celery", f"nobody-{uuid.uuid4().hex[:6]}@nowhere", env=env)
        assert other.returncode == 1 and "did not answer" in other.stderr
    finally:
        worker.terminate()
        worker.wait(timeout=WAIT_S)
