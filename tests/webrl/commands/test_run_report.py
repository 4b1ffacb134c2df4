"""``webrl report RUN``: a stored run's report written again, a run stopped midway included."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

PHASE_0 = {"phase": 0, "status": "done", "evaluate.success": 0.25, "evaluate.n": 4, "evaluate.seconds": 60.0,
           "seed-rollout.rollouts": 8, "seed-rollout.reward_rate": 0.125, "seed-rollout.seconds": 120.0}
#: a phase stopped after its rollouts: no training and no evaluation yet
PHASE_1 = {"phase": 1, "status": "running", "generate.generated": 16, "generate.seconds": 1.0, "filter.kept": 8,
           "filter.seconds": 2.0, "rollout.rollouts": 8, "rollout.seconds": 240.0}


def _store_run(settings, name: str) -> None:
    from webrl.db import models as m
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope

    upgrade(settings)
    with session_scope(settings) as s:
        run = m.Run(name=name, options={})
        s.add(run)
        s.flush()
        for index, metrics in enumerate((PHASE_0, PHASE_1)):
            s.add(m.Phase(run_id=run.id, index=index, status=metrics["status"], metrics=metrics))


def test_report_writes_a_stopped_runs_report_and_shows_its_table(settings, tmp_path: Path) -> None:
    from webrl.cli import app

    _store_run(settings, "stopped")
    result = CliRunner().invoke(app, ["report", "stopped", "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "report.md").read_text()
    assert text.startswith("# webrl run `stopped`")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert "25.0%" in rows["0"] and "| 4 |" in rows["1"]  # phase 1 reports its rollout minutes, no test success
    assert (tmp_path / "out" / "success_per_phase.png").stat().st_size > 0
    assert "webrl run stopped" in result.output and str(tmp_path / "out" / "report.md") in "".join(
        result.output.split())

    default = CliRunner().invoke(app, ["report", "stopped"])  # where `webrl train` writes it
    assert default.exit_code == 0, default.output
    assert (settings.artifacts_dir / "reports" / "stopped" / "report.md").is_file()


def test_report_names_the_runs_stored_when_the_run_is_unknown(settings, tmp_path: Path) -> None:
    from webrl.cli import app

    empty = CliRunner().invoke(app, ["report", "cpu-demo"])  # nothing migrated yet: nothing stored
    assert empty.exit_code == 2 and "no run named 'cpu-demo'" in empty.output and "none" in empty.output
    _store_run(settings, "seed0")
    result = CliRunner().invoke(app, ["report", "seed1", "--output", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "no run named 'seed1'" in result.output and "seed0" in result.output
    assert not (tmp_path / "out").exists()  # nothing written for a run that is not there
