"""Engines and sessions. Nothing is created at import: callers ask for an engine from a URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from webrl.config import Settings, get_settings

#: Pragmas every SQLite connection gets: WAL and foreign keys so concurrent readers work, and a wait on a lock.
SQLITE_PRAGMAS = ("journal_mode=WAL", "foreign_keys=ON", "busy_timeout=30000")
#: A read-only connection's: writes fail (``query_only``); the journal mode is the writers' to set.
SQLITE_READ_ONLY_PRAGMAS = ("query_only=ON", "busy_timeout=30000")
#: A read-only PostgreSQL connection opens every transaction read-only.
PG_READ_ONLY_OPTIONS = "-c default_transaction_read_only=on"


def _sqlite_engine(url: str, pragmas: tuple[str, ...]) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        cur = dbapi_conn.cursor()
        for pragma in pragmas:
            cur.execute(f"PRAGMA {pragma}")
        cur.close()

    return engine


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One pooled engine per URL (SQLite with :data:`SQLITE_PRAGMAS`)."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return _sqlite_engine(url, SQLITE_PRAGMAS)
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


@lru_cache(maxsize=8)
def read_only_engine_for(url: str) -> Engine:
    """An engine whose connections cannot write: PostgreSQL opens every transaction read-only, SQLite answers
    writes with an error (what the viewer reads with)."""
    if url.startswith("sqlite"):
        return _sqlite_engine(url, SQLITE_READ_ONLY_PRAGMAS)
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10,
                         connect_args={"options": PG_READ_ONLY_OPTIONS})


def get_engine(settings: Settings | None = None) -> Engine:
    settings = settings or get_settings()
    assert settings.database.url is not None
    return engine_for(settings.database.url)


def session_factory(settings: Settings | None = None) -> sessionmaker[Session]:
    return sessionmaker(get_engine(settings), expire_on_commit=False)


@contextmanager
def session_scope(settings: Settings | None = None) -> Iterator[Session]:
    """A transaction: commits on success, rolls back on any error, always closes."""
    session = session_factory(settings)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@contextmanager
def read_only_scope(settings: Settings | None = None) -> Iterator[Session]:
    """A session on :func:`read_only_engine_for` (what the viewer reads with): nothing it does can write, and it
    always ends with a rollback."""
    settings = settings or get_settings()
    assert settings.database.url is not None
    session = Session(read_only_engine_for(settings.database.url))
    try:
        yield session
    finally:
        session.rollback()
        session.close()
