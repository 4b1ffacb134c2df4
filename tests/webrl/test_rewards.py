"""The reward rule and the success rule (the label store's use of the rule: tests/webrl/test_db.py)."""

from __future__ import annotations

from webrl.method.rewards import is_success, reward_of


def test_reward_threshold() -> None:
    assert reward_of(0.5) == 1.0 and reward_of(0.4999) == 0.0 and reward_of(0.7, threshold=0.8) == 0.0


def test_success_is_a_score_of_at_least_one_half() -> None:
    assert [is_success(s) for s in (0.0, 0.4999, 0.5, 1.0)] == [False, False, True, True]
