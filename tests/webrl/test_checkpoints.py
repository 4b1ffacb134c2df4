"""Atomic checkpoint publishing: digest, manifest, rows, Redis events, and crashes that leave nothing visible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.db.session import session_scope
from webrl.store import checkpoints as ck


def _write_files(folder: Path) -> None:
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "sub").mkdir()
    (folder / "sub" / "weights.bin").write_bytes(b"\x00\x01" * 1000)


@pytest.fixture
def db(settings: Settings) -> Settings:
    from webrl.db.migrate import upgrade

    upgrade(settings)
    return settings


def test_publish_writes_manifest_digest_and_row(db: Settings, tmp_path: Path) -> None:
    dest = tmp_path / "models" / "actor" / "v1"
    info = ck.publish(db, _write_files, dest, role="actor", version="v1", phase=2, parent_version="v0",
                      metrics={"loss": 0.5})
    assert dest.is_dir() and (dest / "sub" / "weights.bin").is_file()
    manifest = ck.read_manifest(dest)
    assert manifest["version"] == "v1" and manifest["sha256"] == info.sha256 == ck.folder_sha256(dest)
    assert ck.verify(dest) and ck.verify(dest, info.sha256)
    assert [p.name for p in dest.parent.iterdir()] == ["v1"]  # no temporary folder left behind
    with session_scope(db) as session:
        rows = ck.list_checkpoints(session, "actor")
        assert ck.list_checkpoints(session, "critic") == []
    assert [(r.version, r.sha256, r.phase, r.parent_version, r.metrics) for r in rows] == [
        ("v1", info.sha256, 2, "v0", {"loss": 0.5})]
    (dest / "sub" / "weights.bin").write_bytes(b"tampered")
    assert not ck.verify(dest)


def test_a_version_published_again_brings_its_row_to_the_folder_on_disk(db: Settings, tmp_path: Path) -> None:
    """A retried job whose retrain is not bit-identical publishes its version again (replace=True): the row must
    describe the new folder, or its sha256 never verifies and every later delivery retrains."""
    dest = tmp_path / "models" / "critic" / "v1"
    first = ck.publish(db, _write_files, dest, role="critic", version="v1", metrics={"loss": 0.5})

    def other_weights(folder: Path) -> None:
        _write_files(folder)
        (folder / "sub" / "weights.bin").write_bytes(b"\x02" * 2000)

    again = ck.publish(db, other_weights, dest, role="critic", version="v1", metrics={"loss": 0.4}, replace=True)
    assert again.sha256 != first.sha256 and ck.verify(dest, again.sha256)
    with session_scope(db) as session:
        (row,) = ck.list_checkpoints(session, "critic")
    assert (row.sha256, row.metrics) == (again.sha256, {"loss": 0.4})
    assert ck.verify(row.path, row.sha256)


def test_manifest_names_the_folder_relative_to_the_store_and_reads_back_where_it_is(db: Settings,
                                                                                    tmp_path: Path) -> None:
    """A published folder records no machine's path: the manifest file says ``models/actor/v1`` (relative to the
    artifacts store), the row and the event the full path, and a folder moved elsewhere reads back its new place."""
    import json
    import shutil

    dest = db.artifacts_dir / "models" / "actor" / "v1"
    info = ck.publish(db, _write_files, dest, role="actor", version="v1")
    assert json.loads((dest / ck.MANIFEST_FILE).read_text())["path"] == "models/actor/v1"
    assert info.path == str(dest.resolve()) and ck.read_manifest(dest)["path"] == info.path
    moved = tmp_path / "shipped" / "v1"
    shutil.copytree(dest, moved)
    assert ck.read_manifest(moved)["path"] == str(moved.resolve()) and ck.verify(moved)
    outside = ck.publish_folder(_write_files, tmp_path / "elsewhere", role="actor", version="v2",
                                store=db.artifacts_dir)
    assert json.loads((tmp_path / "elsewhere" / ck.MANIFEST_FILE).read_text())["path"] == outside.path


def test_digest_depends_on_names_and_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        _write_files(folder)
    assert ck.folder_sha256(a) == ck.folder_sha256(b)
    (b / "config.json").rename(b / "config2.json")
    assert ck.folder_sha256(a) != ck.folder_sha256(b)


def test_content_digest_ignores_the_writers_version_stamp_and_nothing_else(tmp_path: Path) -> None:
    """The same weights converted under transformers 5.23 and 5.24 differ only in the ``transformers_version``
    that save_pretrained stamps into config.json: one model, one content sha256; two folder sha256s."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, version in ((a, "5.23.0"), (b, "5.24.0")):
        folder.mkdir()
        _write_files(folder)
        (folder / "config.json").write_text(json.dumps({"hidden_size": 576, "transformers_version": version}))
    (b / "config.json").write_text(json.dumps({"transformers_version": "5.24.0", "hidden_size": 576}, indent=2))
    assert ck.folder_sha256(a) != ck.folder_sha256(b)
    assert ck.content_sha256(a) == ck.content_sha256(b)
    (b / "config.json").write_text(json.dumps({"hidden_size": 577, "transformers_version": "5.24.0"}))
    assert ck.content_sha256(a) != ck.content_sha256(b)
    (b / "config.json").write_text((a / "config.json").read_text())
    (b / "sub" / "weights.bin").write_bytes(b"\x00\x02" * 1000)
    assert ck.content_sha256(a) != ck.content_sha256(b)


def test_one_command_hashes_a_model_folder_once_and_again_after_any_rewrite(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``webrl eval`` keys an actor by its content twice (the evaluation, then the template table) and a run names
    it once more (``content_identity``): one read of the folder while no file below it changes, a new one after."""
    from webrl.method.hyperparams import Rollout
    from webrl.orchestration.pipeline_state import content_identity
    from webrl.store.evaluations import evaluation_key

    folder = tmp_path / "actor"
    folder.mkdir()
    _write_files(folder)
    reads: list[str] = []
    real = ck.content_sha256
    monkeypatch.setattr(ck, "content_sha256", lambda path: reads.append(str(path)) or real(path))
    first = evaluation_key(settings, folder, [("k", {})], Rollout()).actor_sha256
    assert evaluation_key(settings, folder, [("k", {})], Rollout()).actor_sha256 == first
    assert content_identity(str(folder)) == first == real(folder)
    assert len(reads) == 1
    (folder / "sub" / "weights.bin").write_bytes(b"\x00\x03" * 1000)
    assert content_identity(str(folder)) != first and len(reads) == 2
    assert content_identity(str(tmp_path / "missing")) is None


def test_existing_destination_needs_replace(tmp_path: Path) -> None:
    dest = tmp_path / "v"
    ck.publish_folder(_write_files, dest, role="actor", version="v")
    with pytest.raises(ck.CheckpointError):
        ck.publish_folder(_write_files, dest, role="actor", version="v")
    info = ck.publish_folder(lambda f: (f / "only.txt").write_text("new"), dest, role="actor", version="v2",
                             replace=True)
    assert sorted(p.name for p in dest.iterdir()) == sorted([ck.MANIFEST_FILE, "only.txt"])
    assert info.version == "v2" and [p.name for p in tmp_path.iterdir()] == ["v"]


def test_an_error_while_writing_leaves_nothing(tmp_path: Path) -> None:
    def half(folder: Path) -> None:
        (folder / "config.json").write_text("{}")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ck.publish_folder(half, tmp_path / "v1", role="actor", version="v1")
    assert list(tmp_path.iterdir()) == []


def test_a_killed_process_leaves_no_visible_checkpoint(tmp_path: Path) -> None:
    """The writer process dies (os._exit, no cleanup) halfway through writing: the destination does not exist;
    only a hidden temporary folder remains, which listing ignores and cleanup removes."""
    script = f"""
import os
from pathlib import Path
from webrl.store.checkpoints import publish_folder
def write(folder):
    (folder / "config.json").write_text("{{}}")
    os._exit(9)
publish_folder(write, Path({str(tmp_path / 'v1')!r}), role="actor", version="v1")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 9
    assert not (tmp_path / "v1").exists()
    leftovers = list(tmp_path.iterdir())
    assert len(leftovers) == 1 and leftovers[0].name.startswith(ck.TEMP_PREFIX)
    assert ck.remove_stale_temporaries(tmp_path) == 0  # young: it may be a publish in progress
    assert ck.remove_stale_temporaries(tmp_path, older_than_s=0.0) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_next_publish_removes_what_killed_publishes_left_long_ago(tmp_path: Path) -> None:
    stale, live = tmp_path / f"{ck.TEMP_PREFIX}v1-dead", tmp_path / f"{ck.TEMP_PREFIX}v3-writing"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 64)
    long_ago = time.time() - ck.STALE_AFTER_S - 60
    os.utime(stale, (long_ago, long_ago))
    ck.publish_folder(lambda d: (d / "config.json").write_text("{}"), tmp_path / "v2", role="actor", version="v2")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["v2", live.name])


@pytest.mark.redis
def test_publish_announces_on_redis(db: Settings, redis_url: str, tmp_path: Path) -> None:
    import redis

    db.jobs.redis_url = redis_url
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub()
    pubsub.subscribe(ck.CHANNEL)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    received: list[dict] = []

    def listen() -> None:
        message = pubsub.get_message(timeout=10)
        if message:
            received.append(json.loads(message["data"]))

    thread = threading.Thread(target=listen)
    thread.start()
    info = ck.publish(db, _write_files, tmp_path / "c1", role="critic", version="c1")
    thread.join(15)
    pubsub.close()
    client.close()
    assert received == [{"role": "critic", "version": "c1", "path": info.path, "sha256": info.sha256}]


def test_a_replacing_publish_killed_between_its_renames_leaves_the_old_version_to_be_put_back(tmp_path: Path) -> None:
    """Killed after moving the published folder aside and before renaming the new one in: the path is empty and
    the old copy hidden. The next publish beside it puts the old version back first (as its row says), and keeps it
    past the stale-temporaries cleanup."""
    first = ck.publish_folder(lambda d: (d / "config.json").write_text('{"v": 1}'), tmp_path / "orm", role="orm",
                              version="orm-1")
    aside = tmp_path / f"{ck.TEMP_PREFIX}old-orm-0a1b2c3d"
    os.rename(tmp_path / "orm", aside)  # where the killed publish left it
    long_ago = time.time() - ck.STALE_AFTER_S - 60
    os.utime(aside, (long_ago, long_ago))
    ck.publish_folder(lambda d: (d / "config.json").write_text("{}"), tmp_path / "critic", role="critic",
                      version="critic-1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["critic", "orm"]
    assert ck.verify(tmp_path / "orm", first.sha256) and json.loads((tmp_path / "orm" / "config.json").read_text())
