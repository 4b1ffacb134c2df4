"""``webrl db``: database migrations."""

from __future__ import annotations

import typer

from webrl.config import get_settings


def register(app: typer.Typer) -> None:
    db = typer.Typer(help="Database: migrations.", no_args_is_help=True)

    @db.command("upgrade")
    def upgrade(revision: str = typer.Argument("head", help="Alembic revision to upgrade to.")) -> None:
        """Create or migrate the database at WEBRL_DATABASE_URL (SQLite under WEBRL_HOME by default)."""
        from webrl.db.migrate import upgrade as run_upgrade

        settings = get_settings()
        run_upgrade(settings, revision)
        typer.echo(f"database at {settings.database_url} is at {revision}")

    app.add_typer(db, name="db")
