"""docker/vllm_supervisor.py against the real trainer API: it serves the initial (SFT) folder, and when the
trainer publishes a full-weight actor checkpoint it stops the server and starts it on the new folder; adapters are
served on their base and hot-loaded by the actor service, not restarted. The stand-in for ``vllm serve`` is a
script that records its argv, its runtime-LoRA variable and how it ended (tests/services/actor/test_actor_vllm.py
runs vLLM itself)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from webrl.config import Settings

ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR = ROOT / "docker" / "vllm_supervisor.py"
sys.path.insert(0, str(SUPERVISOR.parent))
from vllm_supervisor import newest_actor  # noqa: E402

FAKE_SERVE = """\
import json, os, signal, sys, time
log = sys.argv[1]
def record(event):
    lora = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")
    with open(log, "a") as f:
        f.write(json.dumps({"event": event, "argv": sys.argv[2:], "runtime_lora": lora}) + "\\n")
def stop(*_):
    record("stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
record("started")
while True:
    time.sleep(0.05)
"""
WAIT_S = 20.0


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _wait_for(log: Path, count: int) -> list[dict]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        events = _events(log)
        if len(events) >= count:
            return events
        time.sleep(0.05)
    raise AssertionError(f"expected {count} events, got {_events(log)}")


@pytest.fixture
def trainer_url(settings: Settings) -> Iterator[str]:
    """The real trainer API on a free port, over a migrated SQLite database."""
    from services.trainer.app import create_trainer_app
    from webrl.db.migrate import upgrade

    upgrade(settings)
    server = uvicorn.Server(uvicorn.Config(create_trainer_app(settings), host="127.0.0.1", port=0,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        assert time.monotonic() < deadline, "trainer API did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_newest_actor_is_the_last_actor_row() -> None:
    rows = [{"role": "actor", "version": "a1", "path": "/m/a1"}, {"role": "critic", "version": "c", "path": "/c"},
            {"role": "actor", "version": "a2", "path": "/m/a2"}, {"role": "actor", "version": "x", "path": ""}]
    assert newest_actor(rows).path == "/m/a2"
    assert newest_actor({"checkpoints": rows}).version == "a2"
    assert newest_actor([{"role": "critic", "path": "/c"}]) is None


def test_supervisor_reloads_vllm_on_a_published_actor(settings: Settings, trainer_url: str, tmp_path: Path) -> None:
    from webrl.store.checkpoints import publish

    initial = tmp_path / "actor-sft"
    initial.mkdir()
    fake, log = tmp_path / "fake_vllm.py", tmp_path / "serve.log"
    fake.write_text(FAKE_SERVE)
    env = {**os.environ, "WEBRL_TRAINER_URL": trainer_url}
    env.pop("WEBRL_SECURITY__API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, str(SUPERVISOR), "--port", "18000", "--initial-model", str(initial), "--poll-s", "0.3",
         "--stop-timeout-s", "5", "--serve-cmd", f"{sys.executable} {fake} {log}", "--", "--dtype", "bfloat16"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = _wait_for(log, 1)[0]
        assert first["event"] == "started"
        assert first["argv"] == [str(initial), "--host", "0.0.0.0", "--port", "18000", "--served-model-name",
                                 str(initial), "--dtype", "bfloat16"]

        dest = settings.artifacts_dir / "models" / "actor" / "phase1"
        info = publish(settings, lambda folder: (folder / "config.json").write_text("{}"), dest,
                       role="actor", version="phase1", phase=1)
        events = _wait_for(log, 3)
        assert [e["event"] for e in events[:3]] == ["started", "stopped", "started"]
        assert events[2]["argv"][0] == info.path
        assert events[2]["argv"][events[2]["argv"].index("--served-model-name") + 1] == str(initial)
        time.sleep(1.0)  # several more polls: the same checkpoint is not reloaded again
        assert len(_events(log)) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, out
    assert _events(log)[-1]["event"] == "stopped"  # the supervisor stops vLLM when it is stopped


def test_supervisor_serves_adapters_on_their_base_and_restarts_only_for_full_weights(
        settings: Settings, trainer_url: str, tmp_path: Path) -> None:
    """An adapter initial model is served on --base-model under the served name; a published adapter restarts
    nothing (the actor service hot-loads it); a published full-weight checkpoint restarts vLLM on it."""
    from webrl.store.checkpoints import publish

    initial, base = tmp_path / "actor-sft", tmp_path / "base"
    initial.mkdir()
    base.mkdir()
    (initial / "adapter_config.json").write_text("{}")
    fake, log = tmp_path / "fake_vllm.py", tmp_path / "serve.log"
    fake.write_text(FAKE_SERVE)
    env = {**os.environ, "WEBRL_TRAINER_URL": trainer_url}
    env.pop("WEBRL_SECURITY__API_KEY", None)
    env.pop("VLLM_ALLOW_RUNTIME_LORA_UPDATING", None)
    proc = subprocess.Popen(
        [sys.executable, str(SUPERVISOR), "--port", "18000", "--initial-model", str(initial), "--base-model",
         str(base), "--poll-s", "0.3", "--stop-timeout-s", "5", "--serve-cmd", f"{sys.executable} {fake} {log}",
         "--", "--max-lora-rank", "16"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = _wait_for(log, 1)[0]
        assert first["argv"] == [str(base), "--host", "0.0.0.0", "--port", "18000", "--served-model-name", str(base),
                                 "--enable-lora", "--lora-modules", f"{initial}={initial}", "--max-lora-rank", "16"]
        assert first["runtime_lora"] == "True"

        models = settings.artifacts_dir / "models" / "actor"
        publish(settings, lambda folder: (folder / "adapter_config.json").write_text("{}"), models / "phase1",
                role="actor", version="phase1", phase=1)
        time.sleep(1.5)  # several polls: an adapter is hot-loaded by the actor service, vLLM keeps running
        assert len(_events(log)) == 1

        info = publish(settings, lambda folder: (folder / "config.json").write_text("{}"), models / "phase2",
                       role="actor", version="phase2", phase=2)
        events = _wait_for(log, 3)
        assert [e["event"] for e in events[:3]] == ["started", "stopped", "started"]
        assert events[2]["argv"][:1] + events[2]["argv"][5:7] == [info.path, "--served-model-name", str(initial)]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, out
