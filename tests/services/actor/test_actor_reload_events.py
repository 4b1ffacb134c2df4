"""Checkpoint events: which ones the subscriber acts on (no Redis needed for the parsing and the checks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from services.actor.reload import CheckpointSubscriber, parse_event
from webrl.store.checkpoints import publish_folder


def test_parse_event_keeps_only_well_formed_actor_events() -> None:
    good = {"role": "actor", "version": "v2", "path": "/x", "sha256": "ab"}
    assert parse_event(json.dumps(good)) == good
    assert parse_event(json.dumps({**good, "role": "critic"})) is None
    assert parse_event(json.dumps({**good, "version": ""})) is None
    assert parse_event(json.dumps({k: v for k, v in good.items() if k != "sha256"})) is None
    assert parse_event(b"not json") is None and parse_event(json.dumps([1])) is None


def test_handle_loads_new_intact_checkpoints_only(actor_model_dir: Path, tmp_path: Path) -> None:
    info = publish_folder(lambda tmp: shutil.copytree(actor_model_dir, tmp, dirs_exist_ok=True),
                          tmp_path / "v2", role="actor", version="v2")
    loaded: list[tuple[str, str]] = []
    current = ["v1"]
    subscriber = CheckpointSubscriber("redis://unused", lambda p, v: loaded.append((p, v)), lambda: current[0])
    assert not subscriber.handle(json.dumps({**info.event(), "sha256": "f" * 64}))  # tampered
    assert subscriber.handle(json.dumps(info.event()))
    assert loaded == [(info.path, "v2")] and subscriber.loaded == ["v2"]
    current[0] = "v2"
    assert not subscriber.handle(json.dumps(info.event()))  # already serving it

    def failing(path: str, version: str) -> None:
        raise RuntimeError("out of memory")

    broken = CheckpointSubscriber("redis://unused", failing, lambda: "v1")
    assert not broken.handle(json.dumps(info.event())) and broken.loaded == []


def test_an_event_naming_a_folder_a_request_may_not_name_is_refused(actor_model_dir: Path, tmp_path: Path) -> None:
    """Whoever can publish on the channel announces the path and its sha256 alike: the folder must be one a request
    may name (the service passes webrl.serving.paths.requested_model_folder)."""
    from webrl.config import Settings
    from webrl.serving.paths import requested_model_folder

    store = Settings(home=tmp_path / "home", security={"model_dirs": []}, _env_file=None)
    elsewhere = publish_folder(lambda tmp: shutil.copytree(actor_model_dir, tmp, dirs_exist_ok=True),
                               tmp_path / "elsewhere" / "v2", role="actor", version="v2")
    inside = publish_folder(lambda tmp: shutil.copytree(actor_model_dir, tmp, dirs_exist_ok=True),
                            store.artifacts_dir / "models" / "actor" / "v3", role="actor", version="v3")
    loaded: list[str] = []
    subscriber = CheckpointSubscriber("redis://unused", lambda p, v: loaded.append(v), lambda: "v1",
                                      check_path=lambda path: requested_model_folder(store, path, "path"))
    assert not subscriber.handle(json.dumps(elsewhere.event())) and loaded == []
    assert subscriber.last_error and "outside the artifacts store" in subscriber.last_error
    assert subscriber.handle(json.dumps(inside.event())) and loaded == ["v3"]


def test_the_listener_subscribes_again_after_redis_restarts(actor_model_dir: Path, tmp_path: Path) -> None:
    """A Redis restart (a pod rescheduled) must not end hot reloads for the life of the service: the listener says
    why in its error while Redis is away, subscribes again, and loads the next checkpoint announced."""
    import socket
    import subprocess
    import time

    import redis as redis_client

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def redis_server() -> subprocess.Popen:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no"], stdout=subprocess.DEVNULL)
        for _ in range(100):
            try:
                redis_client.Redis(port=port).ping()
                return server
            except redis_client.ConnectionError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def until(condition, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)

    info = publish_folder(lambda tmp: shutil.copytree(actor_model_dir, tmp, dirs_exist_ok=True),
                          tmp_path / "v2", role="actor", version="v2")
    loaded: list[str] = []
    server = redis_server()
    subscriber = CheckpointSubscriber(f"redis://127.0.0.1:{port}/0", lambda p, v: loaded.append(v), lambda: "v1",
                                      channel="webrl:checkpoints:restart")
    subscriber.start()
    try:
        server.terminate()
        server.wait(10)
        until(lambda: subscriber.error is not None and "listening on" in subscriber.error)
        server = redis_server()
        client = redis_client.Redis(port=port)
        until(lambda: client.publish("webrl:checkpoints:restart", json.dumps(info.event())) > 0 or bool(loaded))
        until(lambda: loaded == ["v2"])
        assert subscriber.error is None and subscriber._thread.is_alive()
    finally:
        subscriber.stop()
        server.terminate()
        server.wait(10)
