"""``python -m webrl.demo --seed N``: another seed is a run of its own; a bad seed is one line naming the option."""

from __future__ import annotations

import pytest

from webrl.demo import main, run_name


def test_seed_zero_is_make_demos_run_and_another_seed_a_run_of_its_own() -> None:
    assert run_name(0) == "cpu-demo"
    assert run_name(1) == "cpu-demo-seed1" != run_name(2)


def test_a_seed_that_is_not_a_number_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--seed", "one"])
    assert stopped.value.code == 2
    assert "--seed: invalid int value: 'one'" in capsys.readouterr().err


def test_other_flags_go_to_webrl_train_and_a_lever_gets_a_run_of_its_own() -> None:
    from webrl.demo import parse_demo_args

    assert parse_demo_args([]) == (0, "cpu-demo", [])
    assert parse_demo_args(["--seed", "1", "--run", "cpu-demo-min6", "--min-solved", "6", "--max-attempts=2"]) == (
        1, "cpu-demo-min6", ["--min-solved", "6", "--max-attempts=2"])


@pytest.mark.parametrize("flag", ["--actor", "--preset=cpu-long", "--probe", "--anchors"])
def test_a_flag_the_demo_sets_itself_is_refused_naming_it(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    from webrl.demo import parse_demo_args

    with pytest.raises(SystemExit) as stopped:
        parse_demo_args(["--min-solved", "6", flag, "x"] if "=" not in flag else [flag])
    assert stopped.value.code == 2
    assert f"{flag.split('=')[0]}: the demo runs the shipped SFT actor" in capsys.readouterr().err


def test_without_a_shipped_actor_the_demo_builds_it_by_its_recorded_recipe() -> None:
    """The fallback's two `webrl bootstrap` stages are the commands webrl/assets/PROVENANCE.md records for the
    shipped adapter (stage 1: the bootstrap defaults, which the record says reproduce it; stage 2 flag for flag)."""
    import re
    import shlex

    from webrl.demo import SFT_STAGES, SHIPPED_ACTOR

    record = (SHIPPED_ACTOR.parent / "PROVENANCE.md").read_text()
    command = re.search(r"stage 2: `webrl bootstrap ([^`]+)`", record).group(1)
    assert " --start <stage 1> " in command
    assert shlex.split(command.replace(" --start <stage 1>", "")) == SFT_STAGES[1]
    assert SFT_STAGES[0] == ["--base", "smollm2-135m"]
    assert "so `webrl bootstrap --base smollm2-135m` alone reproduces it" in record


def test_the_demo_names_the_report_folder_train_wrote() -> None:
    from pathlib import Path

    from webrl.demo import report_folder

    default = Path("home/artifacts/reports/cpu-demo")
    assert report_folder([], default) == default
    assert report_folder(["--phases", "3", "--report", "out/r"], default) == Path("out/r")
    assert report_folder(["--report=out/r2"], default) == Path("out/r2")


def test_an_interrupted_run_is_not_reported_done_and_exits_with_its_code(monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C in `webrl train` (not standalone, click returns 130 instead of raising): the demo says how to resume
    and exits 130, never "done: report at" a report nobody wrote."""
    from pathlib import Path

    import webrl.cli
    import webrl.demo

    monkeypatch.setattr(webrl.demo, "sft_actor", lambda settings: Path("actor"))
    monkeypatch.setattr(webrl.cli, "app", lambda args, standalone_mode: 130)
    with pytest.raises(SystemExit) as stopped:
        main([])
    out = capsys.readouterr().out
    assert stopped.value.code == 130 and "done" not in out
    assert "stopped before the end (exit 130)" in out and "resumes run 'cpu-demo'" in out
    monkeypatch.setattr(webrl.cli, "app", lambda args, standalone_mode: 0)  # a run that ended
    main([])
    assert "done: report at" in capsys.readouterr().out
