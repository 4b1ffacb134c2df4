"""``webrl probe anchors``: the sandbox oracle's steps of train tasks, in the probe's format, never from the tasks of
the probe it is told to leave out; bad arguments are refused naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_ports import free_port
from typer.testing import CliRunner

from webrl.models.probe import load_probe

TINY_ACTOR = Path(__file__).resolve().parents[3] / "webrl" / "assets" / "actor-sft"


def test_anchors_come_from_the_oracle_and_leave_out_the_probes_tasks(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from webrl.cli import app
    from webrl.config import get_settings
    from webrl.sandbox.sites import SITES

    monkeypatch.setenv("WEBRL_HOME", str(tmp_path / "home"))
    for site in SITES:  # the sandbox on ports no other test uses
        monkeypatch.setenv(f"WEBRL_SITES__{site.upper()}_URL", f"http://127.0.0.1:{free_port()}")
    get_settings.cache_clear()
    first = tmp_path / "first.jsonl.gz"
    runner = CliRunner()
    made = runner.invoke(app, ["probe", "anchors", "--actor", str(TINY_ACTOR), "--output", str(first),
                               "--max-tasks", "2", "--concurrency", "2"], env={"COLUMNS": "200"})
    assert made.exit_code == 0, made.output
    steps = load_probe(first)
    tasks = sorted({s.task_key for s in steps})
    assert len(tasks) == 2 and all("/train/" in key for key in tasks)
    assert all(s.prompt and ("do(" in s.completion or "exit(" in s.completion) for s in steps)
    assert "(2 tasks)" in made.output

    left_out = tmp_path / "left_out.jsonl.gz"
    made = runner.invoke(app, ["probe", "anchors", "--actor", str(TINY_ACTOR), "--output", str(left_out),
                               "--max-tasks", "2", "--concurrency", "2", "--exclude", str(first)],
                         env={"COLUMNS": "200"})
    assert made.exit_code == 0, made.output
    assert not {s.task_key for s in load_probe(left_out)} & set(tasks)
    get_settings.cache_clear()


def test_anchor_arguments_that_cannot_work_are_refused_naming_the_flag(tmp_path: Path) -> None:
    from webrl.cli import app

    runner = CliRunner()
    wrong_name = runner.invoke(app, ["probe", "anchors", "--actor", str(TINY_ACTOR), "--output",
                                     str(tmp_path / "anchors.json")], env={"COLUMNS": "200"})
    assert wrong_name.exit_code == 2 and "--output" in wrong_name.output and ".jsonl.gz" in wrong_name.output
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_text("not gzip")
    not_a_probe = runner.invoke(app, ["probe", "anchors", "--actor", str(TINY_ACTOR), "--output",
                                      str(tmp_path / "a.jsonl.gz"), "--exclude", str(bad)], env={"COLUMNS": "200"})
    assert not_a_probe.exit_code == 2 and "--exclude" in not_a_probe.output, not_a_probe.output
