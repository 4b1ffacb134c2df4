"""Per-episode site state: one SQLite file per (episode, database), copied lazily from a template.

Layout under ``<settings.home>/sandbox/seed<seed>/``::

    templates/<db>.sqlite            built once per seed by the site's ``seed.build(path, seed)``
    episodes/<episode>/<db>.sqlite   an episode's private copy, made on its first request

An episode is chosen by the cookie ``webrl_episode`` (:data:`EPISODE_COOKIE`). Browsers share cookies
across the ports of one host, so one cookie covers every sandbox site. No cookie means the shared
``default`` episode. Resetting an episode is deleting its folder (:meth:`EpisodeStore.drop`); the next
request copies the template again, a few milliseconds for a few-MB file. Concurrent episodes never
touch each other's files.

Public API::

    store = EpisodeStore(root, seed, builders)   # builders: {db name: seed.build}
    store.template_path(db) -> Path              # builds the template if missing (file lock, atomic rename)
    store.connect(db, episode) -> sqlite3.Connection   # row_factory=sqlite3.Row; the caller commits
    store.drop(episode) -> bool
    episode_cookies(settings, episode) -> list[dict]   # Playwright cookies selecting an episode
    new_episode_id() -> str
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from webrl.config import SITE_PLACEHOLDERS, Settings

log = logging.getLogger(__name__)

EPISODE_COOKIE = "webrl_episode"
DEFAULT_EPISODE = "default"
_EPISODE_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

Builder = Callable[[Path, int], None]


class InvalidEpisodeError(ValueError):
    """An episode id that is not 1-64 characters of ``[A-Za-z0-9_-]``."""


def check_episode_id(episode: str) -> str:
    if not _EPISODE_RE.match(episode):
        raise InvalidEpisodeError(f"episode id {episode!r} must be 1-64 characters of A-Z a-z 0-9 _ -")
    return episode


def new_episode_id() -> str:
    return uuid.uuid4().hex


def sandbox_root(settings: Settings) -> Path:
    """Where the sandbox keeps its files for ``settings.seed``."""
    return Path(settings.home) / "sandbox" / f"seed{settings.seed}"


class EpisodeStore:
    """Template databases and per-episode copies under ``root`` for one seed."""

    def __init__(self, root: Path, seed: int, builders: Mapping[str, Builder]) -> None:
        self.root = Path(root)
        self.seed = seed
        self.builders = dict(builders)
        self._lock = threading.Lock()
        self._ready: set[str] = set()

    # Templates
    def template_path(self, db: str) -> Path:
        """The template file of database ``db``, built on first use (safe across threads and processes)."""
        if db not in self.builders:
            raise KeyError(f"unknown sandbox database {db!r}; known: {sorted(self.builders)}")
        path = self.root / "templates" / f"{db}.sqlite"
        if db in self._ready:
            return path
        with self._lock:
            if not path.exists():
                self._build(db, path)
            self._ready.add(db)
        return path

    def _build(self, db: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / f".{db}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same template
            if path.exists():
                return
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.unlink(missing_ok=True)
            log.info("building sandbox database %s (seed %d) at %s", db, self.seed, path)
            self.builders[db](tmp, self.seed)
            os.replace(tmp, path)

    def build_all(self) -> None:
        for db in self.builders:
            self.template_path(db)

    # Episodes
    def episode_path(self, db: str, episode: str) -> Path:
        return self.root / "episodes" / check_episode_id(episode) / f"{db}.sqlite"

    def connect(self, db: str, episode: str = DEFAULT_EPISODE) -> sqlite3.Connection:
        """A connection to the episode's copy of ``db``; copies the template on the episode's first use."""
        path = self.episode_path(db, episode)
        if not path.exists():
            self._copy(db, path)
        conn = sqlite3.connect(path, timeout=10, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _copy(self, db: str, path: Path) -> None:
        template = self.template_path(db)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{uuid.uuid4().hex[:8]}")
        shutil.copyfile(template, tmp)
        try:
            os.link(tmp, path)  # atomic and never overwrites: a concurrent first request keeps its copy
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)

    def drop(self, episode: str) -> bool:
        """Delete an episode's state (every database). True if it existed. The next request starts fresh."""
        folder = self.root / "episodes" / check_episode_id(episode)
        if not folder.exists():
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return True

    def episodes(self) -> list[str]:
        folder = self.root / "episodes"
        return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def episode_cookies(settings: Settings, episode: str) -> list[dict]:
    """Playwright cookies that put a browser context in ``episode`` on every configured site URL."""
    check_episode_id(episode)
    urls = sorted({settings.site_url(site) for site in SITE_PLACEHOLDERS})
    return [{"name": EPISODE_COOKIE, "value": episode, "url": url} for url in urls]
