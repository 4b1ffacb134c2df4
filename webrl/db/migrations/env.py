"""Alembic environment: the URL comes from the Config (set by webrl.db.migrate), never from a file."""

from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from sqlalchemy import Connection

from webrl.db.models import Base
from webrl.db.session import engine_for

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


@contextmanager
def sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """SQLite's foreign keys off while the migrations run, back on (and checked) after.

    Batch mode rebuilds a SQLite table by copying it and dropping the original; with foreign keys on, that drop
    deletes every referencing row through ON DELETE CASCADE (rebuilding ``trajectories`` would empty ``steps``).
    The pragma is a no-op inside a transaction, so it is set before the migrations' transaction begins."""
    if connection.dialect.name != "sqlite":
        yield
        return
    _pragma(connection, "foreign_keys=OFF")
    try:
        yield
        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
        connection.commit()
        if broken:
            raise RuntimeError(f"the migration left rows whose foreign keys point nowhere: {broken[:5]}")
    finally:
        _pragma(connection, "foreign_keys=ON")  # the pooled connection goes back as it came


def _pragma(connection: Connection, pragma: str) -> None:
    """Set a pragma and end the transaction SQLAlchemy began for it, so Alembic's own transaction commits."""
    connection.exec_driver_sql(f"PRAGMA {pragma}")
    connection.commit()


def run_migrations_online() -> None:
    engine = engine_for(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as connection, sqlite_foreign_keys_off(connection):
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
