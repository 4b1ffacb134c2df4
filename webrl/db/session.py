"""Engines and sessions. Nothing is created at import: callers ask for an engine from a URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from webrl.config import Settings, get_settings


@lru_cache(maxsize=8)
def engine_for(url: str) -> Engine:
    """One pooled engine per URL. SQLite gets WAL and foreign keys so concurrent readers work."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def get_engine(settings: Settings | None = None) -> Engine:
    settings = settings or get_settings()
    assert settings.database_url is not None
    return engine_for(settings.database_url)


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
