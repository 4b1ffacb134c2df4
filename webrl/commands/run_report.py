"""``webrl report``: the report of a stored run, finished or stopped midway, written again from the database."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from webrl.commands import check_output_folder
from webrl.config import get_settings

console = Console()


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        run: str = typer.Argument(..., help="The run's name (`webrl train --run`; `make demo`: cpu-demo)."),
        output: Path = typer.Option(None, callback=lambda output: check_output_folder(output, "--output"),
                                    help="Folder for report.md and its plots. Default: "
                                    "<artifacts>/reports/<run>, where `webrl train` writes it."),
    ) -> None:
        """Write a stored run's report (report.md, plots) and show its phase table; a run stopped midway reports
        the phases it finished."""
        from webrl.commands.train import print_phase_table
        from webrl.orchestration.pipeline_state import stored_run_names, unknown_run
        from webrl.runs.report import write_report

        settings = get_settings()
        names = stored_run_names(settings)
        if run not in names:
            raise typer.BadParameter(str(unknown_run(run, names)).removeprefix("run: "), param_hint="RUN")
        assert settings.artifacts_dir is not None
        print_phase_table(settings, run)
        console.print(f"report: {write_report(settings, run, output or settings.artifacts_dir / 'reports' / run)}")
