"""The validate stage's sign test (webrl.method.acceptance): an update that loses significantly more validation tasks
than it gains is refused; one that churns, or changes nothing, is published."""

from __future__ import annotations

import math

import pytest

from webrl.method.acceptance import losses_p, verdict


def test_the_one_sided_sign_test_is_the_binomial_tail() -> None:
    assert losses_p(0, 0) == 1.0  # nothing discordant: no evidence either way
    assert losses_p(3, 0) == 1.0  # only gains: P(X >= 0) = 1
    assert losses_p(0, 5) == 1 / 32  # five losses and no gain: 2^-5
    assert losses_p(1, 6) == pytest.approx((math.comb(7, 6) + 1) / 128)
    assert losses_p(5, 5) == pytest.approx(sum(math.comb(10, k) for k in range(5, 11)) / 1024)
    assert losses_p(2, 3) > losses_p(1, 4) > losses_p(0, 5)  # more gains beside the losses: weaker evidence


def test_a_collapse_is_refused_and_churn_is_published() -> None:
    tasks = [f"train/{i}" for i in range(40)]
    start = tasks[:12]
    collapsed = verdict(tasks, start, tasks[:3], alpha=0.05)  # 9 lost, none gained
    assert (collapsed.gained, collapsed.lost, collapsed.accepted) == (0, 9, False)
    assert collapsed.p == pytest.approx(2**-9, abs=1e-6)
    assert (collapsed.tasks, collapsed.start_solved, collapsed.solved) == (40, 12, 3)
    churned = verdict(tasks, start, tasks[4:18], alpha=0.05)  # 4 lost, 6 gained
    assert (churned.gained, churned.lost, churned.accepted) == (6, 4, True)
    assert verdict(tasks, start, start, alpha=0.05).accepted  # unchanged
    # four losses alone are not significant at 5% (p = 1/16), five are (1/32)
    assert verdict(tasks, start, tasks[4:12], alpha=0.05).accepted
    assert not verdict(tasks, start, tasks[5:12], alpha=0.05).accepted
    assert verdict(tasks, start, tasks[5:12], alpha=0.01).accepted  # a stricter level refuses less
    assert collapsed.to_json()["accepted"] is False


def test_solved_tasks_outside_the_validation_tasks_are_an_error() -> None:
    with pytest.raises(ValueError, match="outside the validation tasks"):
        verdict(["a", "b"], ["a"], ["c"], alpha=0.05)
