"""The commands' progress display: rich's bars on a terminal, and plain milestone lines where there is none.

rich redraws its live bars only on a terminal. Written to a file (``nohup``, CI, a Kubernetes pod's log) it shows
the bars once, when the work is over, so a 30-minute evaluation leaves its log silent for 30 minutes.
:class:`ProgressDisplay` keeps rich's bars and, on a console that is not a terminal, also prints one line per bar
each time it passes another tenth of its total, or when a minute has passed since its last line:

    evaluate clip: 40/165 (24%), 7:12 elapsed, about 22:30 left
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class StageTimeRemaining(TimeRemainingColumn):
    """rich's time left for a stage's bar; blank on the run-level bar, whose line gives its own estimate (rich's
    would extrapolate stages of very different lengths)."""

    def render(self, task: Task) -> Text:
        return Text("") if task.fields.get("run") else super().render(task)


def progress_columns() -> tuple[Any, ...]:
    """The display's columns: label, bar, done of total, time elapsed, time left (:class:`StageTimeRemaining`)."""
    return (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            StageTimeRemaining())


def clock_text(seconds: float) -> str:
    """``7:12`` or ``1:02:05``: a duration as a clock reads it."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def milestone_line(task: Task) -> str:
    """One bar as a plain line: ``label: done/total (pct%), elapsed, about left`` (the run-level bar: its own line,
    which carries its estimate)."""
    if task.fields.get("run"):
        return task.description
    line = f"{task.description}: {int(task.completed)}"
    if task.total:
        line += f"/{int(task.total)} ({100 * task.completed / task.total:.0f}%)"
    line += f", {clock_text(task.elapsed or 0.0)} elapsed"
    left = task.time_remaining
    if left is not None and not task.finished:
        line += f", about {clock_text(left)} left"
    return line


class ProgressDisplay(Progress):
    """rich's :class:`~rich.progress.Progress`, which also prints :func:`milestone_line` for a bar on a console
    that is not a terminal whenever the bar has passed another ``every_fraction`` of its total (and when it
    finishes), or ``every_seconds`` have passed since that bar's last line and it moved (on rich's clock,
    ``get_time``)."""

    def __init__(self, *columns: Any, every_fraction: float = 0.1, every_seconds: float = 60.0, **kwargs: Any) -> None:
        super().__init__(*columns, **kwargs)
        if not 0 < every_fraction <= 1:
            raise ValueError(f"every_fraction must be in (0, 1], got {every_fraction}")
        self.every_fraction = every_fraction
        self.every_seconds = every_seconds
        self.logged: dict[TaskID, tuple[int, float, float]] = {}  # bar -> (tenth, completed, when) of its last line

    def update(self, task_id: TaskID, **kwargs: Any) -> None:  # type: ignore[override]
        super().update(task_id, **kwargs)
        self.log_milestone(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self.log_milestone(task_id)

    def log_milestone(self, task_id: TaskID) -> None:
        if self.console.is_terminal:
            return
        task = next((t for t in self.tasks if t.id == task_id), None)
        if task is None:
            return
        share = task.completed / task.total if task.total else 0.0
        step = min(int(share / self.every_fraction + 1e-9), int(1 / self.every_fraction + 1e-9))
        now = self.get_time()
        last = self.logged.get(task_id)
        if last is None:
            due = task.completed > 0 or task.fields.get("run", False)
        else:
            moved = task.completed != last[1]
            due = step > last[0] or (moved and now - last[2] >= self.every_seconds)
        if due:
            self.logged[task_id] = (step, task.completed, now)
            self.console.print(milestone_line(task), markup=False, highlight=False, soft_wrap=True)


def progress_display(console: Console | None = None) -> ProgressDisplay:
    """The display every long command shows: :func:`progress_columns` on ``console`` (rich's own by default)."""
    return ProgressDisplay(*progress_columns(), console=console)
