"""``webrl db``: database migrations."""

from __future__ import annotations

import typer

from webrl.config import get_settings


def register(app: typer.Typer) -> None:
    db = typer.Typer(help="Database: migrations.", no_args_is_help=True)

    @db.command("upgrade")
    def upgrade(revision: str = typer.Argument("head", help="Alembic revision to upgrade to.")) -> None:
        """Create or migrate the database at WEBRL_DATABASE__URL (SQLite under WEBRL_HOME by default)."""
        from alembic.util import CommandError
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import OperationalError

        from webrl.db.migrate import shown_url
        from webrl.db.migrate import upgrade as run_upgrade
        from webrl.errors import UserError
        from webrl.safety.credentials import mask_password

        settings = get_settings()
        assert settings.database.url is not None
        where = shown_url(settings.database.url)  # never the password
        try:
            run_upgrade(settings, revision)
        except OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
            reason = mask_password(reason, settings.database.url)  # the field, not its letters in other words
            raise UserError(f"cannot reach the database at {where}: {reason} (WEBRL_DATABASE__URL)") from None
        except CommandError as exc:  # a revision the migrations do not have
            raise UserError(f"{exc} (REVISION: 'head' or one of webrl/db/migrations/versions)") from None
        except ModuleNotFoundError as exc:  # the URL's dialect is known, its driver is not installed
            driver = make_url(settings.database.url).drivername
            raise UserError(f"the driver of {driver!r} is not installed (no module {exc.name!r}); webrl ships "
                            "sqlite and postgresql+psycopg (WEBRL_DATABASE__URL)") from None
        typer.echo(f"database at {where} is at {revision}")

    app.add_typer(db, name="db")
