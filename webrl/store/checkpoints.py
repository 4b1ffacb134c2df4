"""Checkpoints: publish a model folder atomically, record it, announce it; list and verify them.

Publishing writes into a hidden temporary folder next to the destination, fsyncs every file and folder, then renames
it into place. A crash at any point before the rename leaves only the hidden temporary folder (ignored by
:func:`list_checkpoints`, removed by a later publish once stale: :func:`remove_stale_temporaries`), never a
half-written checkpoint at the published path. The folder carries :data:`MANIFEST_FILE` with its version, role, sha256
and metrics (the same file ``webrl.models.loading.checkpoint_version`` reads). The manifest's ``path`` is where the
folder was published relative to the artifacts store (absolute only for a folder outside it), so a folder that ships
or moves names no machine; :func:`read_manifest` answers with the folder's real location.

The sha256 covers every file of the folder except the manifest: sorted relative paths and their bytes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.config import Settings
from webrl.db import models as m

log = logging.getLogger("webrl.store.checkpoints")

#: The manifest inside every published folder (``webrl.models.loading.VERSION_FILE`` reads its "version").
MANIFEST_FILE = "webrl_checkpoint.json"
#: Redis pub/sub channel of checkpoint events (docs/design.md "Data": Checkpoint).
CHANNEL = "webrl:checkpoints"
#: Prefix of temporary folders; a folder whose name starts with it was never published.
TEMP_PREFIX = ".tmp-publish-"
#: A temporary publish folder unchanged this long is a killed publish's: a live one writes a model's files within
#: minutes, and its folder's time changes with each file it adds.
STALE_AFTER_S = 6 * 3600.0
_CHUNK = 1 << 20


@dataclass
class CheckpointInfo:
    """A published checkpoint: what its row and its manifest say."""

    role: str
    version: str
    path: str
    sha256: str
    phase: int | None = None
    parent_version: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)

    def event(self) -> dict[str, str]:
        """The message on :data:`CHANNEL`: ``{role, version, path, sha256}``."""
        return {"role": self.role, "version": self.version, "path": self.path, "sha256": self.sha256}


class CheckpointError(RuntimeError):
    """A folder is not a valid published checkpoint (missing manifest, digest mismatch, name taken)."""


def folder_sha256(path: str | Path) -> str:
    """sha256 over the sorted relative paths and bytes of every file under ``path`` but the manifest."""
    return _tree_sha256(path, _chunks)


def _chunks(file: Path) -> Iterator[bytes]:
    with file.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


def _tree_sha256(path: str | Path, contents: Callable[[Path], Iterator[bytes]]) -> str:
    """sha256 over the sorted relative paths of every file under ``path`` but the manifest, each followed by
    what ``contents`` reads of it."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST_FILE):
        digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        for chunk in contents(file):
            digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


#: Keys a library writes into a folder's JSON files about itself (the version that wrote them), not about the model:
#: ``save_pretrained`` stamps ``transformers_version`` into config.json and generation_config.json, so the same
#: weights converted under transformers 5.23 and 5.24 differ in those bytes only.
WRITER_STAMPS = frozenset({"transformers_version"})


def content_sha256(path: str | Path) -> str:
    """The folder's identity as a model: :func:`folder_sha256` with every JSON file read as data, its top-level
    :data:`WRITER_STAMPS` dropped and the rest written canonically (sorted keys, no whitespace). Two folders
    with the same weights, tokenizer and configuration have the same content sha256 whichever library version
    (or JSON layout) wrote them; any other change to a file changes it."""
    def canonical(file: Path) -> Iterator[bytes]:
        if file.suffix != ".json":
            yield from _chunks(file)
            return
        data = _json_of(file)
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in WRITER_STAMPS}
        yield json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    return _tree_sha256(path, canonical)


def _json_of(file: Path) -> Any:
    """The data of the JSON file ``file``; ValueError naming it when it is not JSON (or not UTF-8 text)."""
    try:
        return json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file} is not JSON ({exc})") from None


def malformed_json_file(folder: str | Path) -> str | None:
    """Why a JSON file under ``folder`` cannot be read as :func:`content_sha256` reads it, naming the first such
    (in the order it hashes them); None when every one can: a model folder is checked before its identity is
    needed, so a broken file is named up front rather than by a traceback after work has started."""
    root = Path(folder)
    for file in sorted(p for p in root.rglob("*.json") if p.is_file() and p.name != MANIFEST_FILE):
        try:
            _json_of(file)
        except ValueError as exc:
            return str(exc)
    return None


def files_signature(folder: Path) -> tuple[tuple[str, int, int, int, int], ...]:
    """What changes when a file below ``folder`` is written, replaced, added or removed: each file's relative path,
    inode, size and modification and change times (a change time no copy or ``touch`` can set back)."""
    stats = ((p.relative_to(folder).as_posix(), p.stat()) for p in folder.rglob("*") if p.is_file())
    return tuple(sorted((name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for name, st in stats))


def cached_content_sha256(path: str | Path) -> str:
    """:func:`content_sha256` of the folder ``path``, hashed once per process while no file below it changes
    (:func:`files_signature`): what every caller that keys by an actor's content uses, so that one command reads a
    model of billions of parameters once, not once per caller."""
    folder = Path(path)
    return _content_sha256_while(str(folder.resolve()), files_signature(folder))


@functools.lru_cache(maxsize=8)
def _content_sha256_while(folder: str, signature: tuple[tuple[str, int, int, int, int], ...]) -> str:
    """:func:`content_sha256` of ``folder`` while its files have ``signature`` (the cache key)."""
    return content_sha256(folder)


def _fsync_tree(root: Path) -> None:
    """fsync every file, then every folder (deepest first) so names and contents are both durable."""
    folders = [root]
    for p in root.rglob("*"):
        if p.is_file():
            with p.open("rb") as handle:
                os.fsync(handle.fileno())
        elif p.is_dir():
            folders.append(p)
    for folder in sorted(folders, key=lambda d: len(d.parts), reverse=True):
        _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The folder's manifest, its ``path`` resolved to where the folder is now (the file records it relative to the
    artifacts store it was published in)."""
    file = Path(path) / MANIFEST_FILE
    if not file.is_file():
        raise CheckpointError(f"{path} has no {MANIFEST_FILE}: not a published checkpoint")
    manifest = json.loads(file.read_text())
    if isinstance(manifest, dict):
        manifest["path"] = str(Path(path).resolve())
    return manifest


def store_relative(path: str | Path, store: str | Path | None) -> str:
    """``path`` relative to the artifacts store ``store`` (POSIX separators), or absolute when it lies outside."""
    resolved = Path(path).resolve()
    if store is not None and resolved.is_relative_to(Path(store).resolve()):
        return resolved.relative_to(Path(store).resolve()).as_posix()
    return str(resolved)


def verify(path: str | Path, sha256: str | None = None) -> bool:
    """True when the folder's files hash to ``sha256`` (default: the sha256 its manifest records)."""
    try:
        expected = sha256 or read_manifest(path)["sha256"]
    except (CheckpointError, KeyError, json.JSONDecodeError):
        return False
    return folder_sha256(path) == expected


def publish_folder(write: Callable[[Path], None], dest: str | Path, *, role: str, version: str,
                   phase: int | None = None, parent_version: str | None = None,
                   metrics: dict[str, Any] | None = None, replace: bool = False,
                   store: str | Path | None = None) -> CheckpointInfo:
    """Atomically publish the folder that ``write(tmp_dir)`` fills at ``dest``.

    ``write`` fills a temporary folder in ``dest``'s parent; the manifest (version, role, sha256, metrics, and
    ``dest`` relative to the artifacts store ``store``) is added, everything is fsynced, and the folder is renamed
    to ``dest``. An existing ``dest`` is an error unless ``replace``: then it is renamed aside first and deleted
    after the new folder is in place (so ``dest`` never holds a mix of the two).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() and not replace:
        raise CheckpointError(f"{dest} already exists")
    if removed := remove_stale_temporaries(dest.parent):
        log.info("removed %d temporary folder(s) that killed publishes left in %s", removed, dest.parent)
    tmp = dest.parent / f"{TEMP_PREFIX}{dest.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write(tmp)
        sha = folder_sha256(tmp)
        info = CheckpointInfo(role=role, version=version, path=str(dest.resolve()), sha256=sha, phase=phase,
                              parent_version=parent_version, metrics=dict(metrics or {}))
        manifest = {**asdict(info), "path": store_relative(dest, store)}  # the row and the event keep the full path
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=float))
        _fsync_tree(tmp)
        old = None
        if dest.exists():
            old = dest.parent / f"{TEMP_PREFIX}old-{dest.name}-{uuid.uuid4().hex[:8]}"
            os.rename(dest, old)
        os.rename(tmp, dest)
        _fsync_dir(dest.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    log.info("published %s %s at %s (sha256 %s)", role, version, dest, sha[:12])
    return info


def restore_interrupted_replacements(parent: str | Path) -> list[Path]:
    """Put back the folders a publish with ``replace`` moved aside and was killed before it renamed the new one into
    place (``<parent>/<name>`` missing, its old copy ``.tmp-publish-old-<name>-<id>`` there): the last published
    version is at its path again, as its row says. Returns the restored paths."""
    restored = []
    for old in sorted(Path(parent).glob(f"{TEMP_PREFIX}old-*")):
        name = old.name.removeprefix(f"{TEMP_PREFIX}old-").rpartition("-")[0]
        dest = old.parent / name
        if name and not dest.exists():
            os.rename(old, dest)
            restored.append(dest)
            log.warning("restored %s: a replacing publish was killed after moving it aside", dest)
    return restored


def remove_stale_temporaries(parent: str | Path, older_than_s: float = STALE_AFTER_S) -> int:
    """Delete the temporary folders a crashed or killed publish left in ``parent``: those last changed more than
    ``older_than_s`` ago (a younger one may be another process's publish in progress), once any folder a killed
    replacing publish moved aside is back at its path (:func:`restore_interrupted_replacements`); returns how many."""
    restore_interrupted_replacements(parent)
    removed, now = 0, time.time()
    for p in Path(parent).glob(f"{TEMP_PREFIX}*"):
        try:
            stale = now - p.stat().st_mtime > older_than_s
        except FileNotFoundError:  # its publish finished meanwhile
            continue
        if stale:
            shutil.rmtree(p, ignore_errors=True)
            removed += 1
    return removed


def record(session: Session, info: CheckpointInfo) -> m.Checkpoint:
    """The checkpoints row of ``info``, one per (role, version): inserted, or, when a retried job published the
    version again (a retrain that is not bit-identical, on a GPU), brought up to the folder now on disk, so its
    sha256 verifies and the job is not retrained on every later delivery. A concurrent writer (another delivery of
    the job) that committed the row meanwhile is such a publisher too: its row is brought up to date, never an
    ``IntegrityError`` (:func:`webrl.db.repository.insert_once`)."""
    from webrl.db.repository import insert_once

    def stored() -> m.Checkpoint | None:
        return session.scalar(select(m.Checkpoint).where(m.Checkpoint.role == info.role,
                                                         m.Checkpoint.version == info.version))

    metrics = json.loads(json.dumps(info.metrics, default=float))  # plain JSON numbers for the JSON column
    row = stored()
    if row is None:
        row = insert_once(session, m.Checkpoint(role=info.role, version=info.version,
                                                parent_version=info.parent_version, path=info.path,
                                                sha256=info.sha256, phase=info.phase, metrics=metrics), stored)
    if (row.path, row.sha256) != (info.path, info.sha256):
        row.path, row.sha256, row.metrics = info.path, info.sha256, metrics
        session.flush()
    return row


def announce(settings: Settings, info: CheckpointInfo, *, channel: str = CHANNEL) -> bool:
    """Publish ``info.event()`` as JSON on ``channel`` when a Redis URL is configured; True if sent."""
    if not settings.jobs.redis_url:
        return False
    import redis

    client = redis.Redis.from_url(settings.jobs.redis_url, socket_timeout=5)
    try:
        client.publish(channel, json.dumps(info.event()))
    finally:
        client.close()
    return True


def info_of(row: m.Checkpoint) -> CheckpointInfo:
    return CheckpointInfo(role=row.role, version=row.version, path=row.path, sha256=row.sha256, phase=row.phase,
                          parent_version=row.parent_version, metrics=dict(row.metrics or {}))


def find(session: Session, role: str, version: str) -> CheckpointInfo | None:
    row = session.scalar(select(m.Checkpoint).where(m.Checkpoint.role == role, m.Checkpoint.version == version))
    return info_of(row) if row is not None else None


def list_checkpoints(session: Session, role: str | None = None) -> list[CheckpointInfo]:
    """Recorded checkpoints, oldest first, optionally of one role."""
    query = select(m.Checkpoint).order_by(m.Checkpoint.id)
    if role is not None:
        query = query.where(m.Checkpoint.role == role)
    return [info_of(row) for row in session.scalars(query).all()]


def publish(settings: Settings, write: Callable[[Path], None], dest: str | Path, *, role: str, version: str,
            phase: int | None = None, parent_version: str | None = None, metrics: dict[str, Any] | None = None,
            replace: bool = False) -> CheckpointInfo:
    """:func:`publish_folder`, then the checkpoints row (committed), then the Redis event, in that order, so
    whoever hears the event finds both the folder and the row."""
    from webrl.db.session import session_scope

    info = publish_folder(write, dest, role=role, version=version, phase=phase, parent_version=parent_version,
                          metrics=metrics, replace=replace, store=settings.artifacts_dir)
    with session_scope(settings) as session:
        record(session, info)
    announce(settings, info)
    return info
