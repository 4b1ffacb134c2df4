"""``webrl report``: the report of a stored run, finished or stopped midway, written again from the database."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from webrl.config import Settings, get_settings

console = Console()


def stored_run_names(settings: Settings) -> list[str]:
    """The names of the runs stored here, oldest first (an unmigrated database stores none)."""
    from sqlalchemy import inspect, select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as s:
        if not inspect(s.get_bind()).has_table(m.Run.__tablename__):
            return []
        return list(s.scalars(select(m.Run.name).order_by(m.Run.id)))


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        run: str = typer.Argument(..., help="The run's name (`webrl train --run`; `make demo`: cpu-demo)."),
        output: Path = typer.Option(None, help="Folder for report.md and its plots. Default: "
                                    "<artifacts>/reports/<run>, where `webrl train` writes it."),
    ) -> None:
        """Write a stored run's report (report.md, plots) and show its phase table; a run stopped midway reports
        the phases it finished."""
        from webrl.commands.train import print_phase_table
        from webrl.runs.report import write_report

        settings = get_settings()
        names = stored_run_names(settings)
        if run not in names:
            raise typer.BadParameter(f"no run named {run!r}; the runs stored here: {', '.join(names) or 'none'}",
                                     param_hint="RUN")
        assert settings.artifacts_dir is not None
        print_phase_table(settings, run)
        console.print(f"report: {write_report(settings, run, output or settings.artifacts_dir / 'reports' / run)}")
