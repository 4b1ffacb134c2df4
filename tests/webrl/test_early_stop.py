"""WebArena's early stop, counted by hand."""

from webrl.agent.actions import parse_action
from webrl.agent.early_stop import MAX_PARSE_FAILURES, MAX_REPEATED_ACTIONS, EarlyStop, StopRules

CLICK = parse_action('do(action="Click", element="3")')
OTHER = parse_action('do(action="Click", element="4")')


def test_five_unparsable_in_a_row_stop_and_a_good_action_resets_the_count() -> None:
    stop = EarlyStop()
    assert [stop.update(None) for _ in range(MAX_PARSE_FAILURES - 1)] == [None] * 4
    assert stop.update(CLICK) is None
    assert [stop.update(None) for _ in range(MAX_PARSE_FAILURES - 1)] == [None] * 4
    assert stop.update(None) == "parse_failures"


def test_five_identical_actions_in_a_row_stop_and_a_different_one_resets() -> None:
    stop = EarlyStop()
    assert [stop.update(CLICK) for _ in range(MAX_REPEATED_ACTIONS - 1)] == [None] * 4
    assert stop.update(OTHER) is None
    assert [stop.update(CLICK) for _ in range(MAX_REPEATED_ACTIONS - 1)] == [None] * 4
    assert stop.update(CLICK) == "repeated_action"


def test_other_thresholds_stop_sooner_or_later() -> None:
    two_failures = EarlyStop(StopRules(max_parse_failures=2))
    assert [two_failures.update(None) for _ in range(2)] == [None, "parse_failures"]
    seven_repeats = EarlyStop(StopRules(max_repeated_actions=7))
    assert [seven_repeats.update(CLICK) for _ in range(7)] == [None] * 6 + ["repeated_action"]
