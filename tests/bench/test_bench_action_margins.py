"""bench/action_margins.py: the candidates it scores at a stored step, and what it refuses."""

from __future__ import annotations

import pytest
import typer


def test_a_case_is_a_task_a_step_and_element_ids_the_right_one_first(load_bench) -> None:
    margins = load_bench("action_margins")
    case = margins.parse_case("sandbox/test/95:1:10,9")
    assert (case.task, case.step, case.ids) == ("sandbox/test/95", 1, ["10", "9"])
    for bad in ("sandbox/test/95:1:10", "sandbox/test/95:x:10,9", "sandbox/test/95:1:10,b", "10,9"):
        with pytest.raises(typer.BadParameter, match="expected TASK:STEP:ID,ID"):
            margins.parse_case(bad)


def test_a_candidate_is_the_step_s_own_response_with_another_element(load_bench) -> None:
    margins = load_bench("action_margins")
    response = '# Element: Account Information\ndo(action="Click", element="9")'
    assert margins.with_element(response, "10") == '# Element: Account Information\ndo(action="Click", element="10")'
    with pytest.raises(ValueError, match="names no element"):
        margins.with_element('exit(message="On Hold")', "10")


def test_the_margin_is_the_right_id_against_the_best_other(load_bench) -> None:
    margins = load_bench("action_margins")
    assert margins.margin([-0.79, -1.06]) == pytest.approx(0.27)
    assert margins.margin([-4.41, -1.87, -1.74]) == pytest.approx(-2.67)
