"""Run Alembic migrations programmatically (``webrl db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from webrl.config import Settings, get_settings

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolates '%' (e.g. in a password)
    return cfg


def shown_url(url: str) -> str:
    """``url`` fit to print: its password masked."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: show its scheme only
        return url.split(":", 1)[0] + "://…"


def upgrade(settings: Settings | None = None, revision: str = "head") -> None:
    """Bring the database at ``settings.database.url`` to ``revision`` (idempotent)."""
    settings = settings or get_settings()
    assert settings.database.url is not None
    if settings.database.url.startswith("sqlite"):
        settings.ensure_dirs()
    command.upgrade(alembic_config(settings.database.url), revision)


def downgrade(settings: Settings | None = None, revision: str = "base") -> None:
    settings = settings or get_settings()
    assert settings.database.url is not None
    command.downgrade(alembic_config(settings.database.url), revision)
