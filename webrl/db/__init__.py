"""Database layer: models, sessions, shared queries, Alembic migrations."""

from webrl.db.models import Base
from webrl.db.session import get_engine, session_scope

__all__ = ["Base", "get_engine", "session_scope"]
