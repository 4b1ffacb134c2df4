"""The progress display in a log: plain milestone lines where the console is not a terminal, none on a terminal."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from webrl.commands.progress_display import ProgressDisplay, clock_text, progress_columns, progress_display


def logged(every_seconds: float = 60.0) -> tuple[ProgressDisplay, io.StringIO, list[float]]:
    out = io.StringIO()
    now = [0.0]
    display = ProgressDisplay(*progress_columns(), console=Console(file=out, width=200), every_seconds=every_seconds,
                              get_time=lambda: now[0])
    return display, out, now


def test_a_bar_in_a_log_prints_a_line_at_each_tenth_and_at_its_end() -> None:
    display, out, _ = logged()
    bar = display.add_task("evaluate clip", total=165)
    for done in range(1, 166):
        display.update(bar, completed=done)
    lines = out.getvalue().splitlines()
    # the first task done, then 17 (10.3%), 33, ... 165 (100%): one line per tenth passed, never two for one
    assert lines[0].startswith("evaluate clip: 1/165 (1%), 0:00 elapsed")
    assert [line.split(":")[1].split("/")[0].strip() for line in lines] == \
        ["1", "17", "33", "50", "66", "83", "99", "116", "132", "149", "165"]
    assert lines[-1].startswith("evaluate clip: 165/165 (100%)") and "left" not in lines[-1]


def test_a_slow_bar_prints_when_a_minute_has_passed_and_it_moved_since_its_last_line() -> None:
    display, out, now = logged(every_seconds=60.0)
    bar = display.add_task("update clip", total=1000)
    display.advance(bar)  # 1/1000: the first line
    now[0] = 30.0
    display.advance(bar)  # within the minute, the same tenth: nothing
    now[0] = 61.0
    display.update(bar, description="update clip")  # a minute on, and it moved since the line: 2/1000
    now[0] = 130.0
    display.update(bar, description="update clip")  # another minute, but it has not moved: nothing
    display.advance(bar)  # moved: 3/1000
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == \
        ["update clip: 1/1000", "update clip: 2/1000", "update clip: 3/1000"]


def test_on_a_terminal_rich_draws_the_bars_and_no_line_is_added() -> None:
    out = io.StringIO()
    display = ProgressDisplay(*progress_columns(), console=Console(file=out, force_terminal=True, width=120))
    bar = display.add_task("evaluate", total=10)
    for done in range(1, 11):
        display.update(bar, completed=done)
    assert "evaluate:" not in out.getvalue()


def test_the_run_level_bar_logs_its_own_line() -> None:
    display, out, _ = logged()
    run = display.add_task("run: phase 0 of 2, evaluate · about 40 min left", total=14, run=True)
    display.update(run, completed=0)
    display.update(run, completed=2, description="run: phase 0 of 2, seed-rollout · about 35 min left")
    assert out.getvalue().splitlines() == ["run: phase 0 of 2, evaluate · about 40 min left",
                                          "run: phase 0 of 2, seed-rollout · about 35 min left"]


def test_durations_read_as_a_clock_and_a_bad_fraction_is_refused() -> None:
    assert (clock_text(432.9), clock_text(3725)) == ("7:12", "1:02:05")
    assert isinstance(progress_display(Console(file=io.StringIO())), ProgressDisplay)
    with pytest.raises(ValueError, match="every_fraction"):
        ProgressDisplay(every_fraction=0)
