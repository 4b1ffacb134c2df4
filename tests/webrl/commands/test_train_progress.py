"""``webrl train``'s progress display: a bar per stage with rich's time left, and a run-level line with the run's."""

from __future__ import annotations

from rich.console import Console
from rich.progress import Progress

from webrl.commands.progress_display import StageTimeRemaining, progress_columns
from webrl.commands.train import RichProgress
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.runs.eta import RunEta, run_plan


def test_the_run_line_follows_the_stages_and_only_stage_bars_show_rich_s_time_left() -> None:
    now = [0.0]
    eta = RunEta(run_plan(with_overrides(DEFAULTS, {"curriculum.phases": 2})), clock=lambda: now[0])
    console = Console(width=160, record=True)
    progress = Progress(*progress_columns(), console=console)
    assert any(isinstance(c, StageTimeRemaining) for c in progress.columns)
    display = RichProgress(progress)
    display.follow(eta)
    now[0] = 30.0
    display("phase 0: evaluate", 10, 165)  # 3 s per episode so far
    tasks = {t.description: t for t in progress.tasks}
    run = next(t for t in progress.tasks if t.fields.get("run"))
    assert run.description == eta.line() and run.description.startswith("run: phase 0 of 2, evaluate · more than")
    assert (run.completed, run.total) == (0, 2 + 2 * 6)
    column = StageTimeRemaining()
    assert column.render(run).plain == "" and column.render(tasks["phase 0: evaluate"]).plain != ""
    display.stage_done(0, "evaluate", {"seconds": 330.0, "n": 165})
    assert run.completed == 1 and "phase 0 of 2, seed-rollout" in run.description
    console.print(progress.get_renderable())
    assert "run: phase 0 of 2, seed-rollout" in console.export_text()


def test_without_a_run_to_follow_the_display_has_stage_bars_only() -> None:
    progress = Progress(console=Console(width=120))
    display = RichProgress(progress)
    display("evaluate", 3, 4)
    display.stage_done(0, "evaluate", {"seconds": 1.0})
    assert [t.description for t in progress.tasks] == ["evaluate"]
