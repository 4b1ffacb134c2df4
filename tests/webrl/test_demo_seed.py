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
