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


def test_the_margin_refuses_a_net_loss_the_sign_test_lets_through() -> None:
    tasks = [f"train/{i}" for i in range(40)]
    start = tasks[:16]
    # seed 1's published update: 2 gained, 8 lost (16 -> 10), p = 0.055 > 0.05
    update = tasks[:8] + tasks[16:18]
    assert verdict(tasks, start, update, alpha=0.05).accepted
    refused = verdict(tasks, start, update, alpha=0.05, margin=2)
    assert (refused.gained, refused.lost, refused.accepted, refused.refused_by) == (2, 8, False, "margin")
    assert refused.to_json()["refused_by"] == "margin" and refused.to_json()["margin"] == 2
    # a net loss of exactly the margin passes; one more task does not
    assert verdict(tasks, start, tasks[:14], alpha=0.05, margin=2).accepted  # 16 -> 14
    assert not verdict(tasks, start, tasks[:13], alpha=0.05, margin=2).accepted  # 16 -> 13
    # churn with a net gain passes whatever the margin; a collapse is the sign test's, margin or not
    assert verdict(tasks, start, tasks[4:22], alpha=0.05, margin=0).accepted  # 4 lost, 6 gained
    assert verdict(tasks, start, tasks[:3], alpha=0.05, margin=20).refused_by == "sign test"
    assert verdict(tasks, start, tasks[:3], alpha=0.05, margin=2).refused_by == "sign test"  # both: the test's
    assert verdict(tasks, start, start, alpha=0.05, margin=0).refused_by is None
    with pytest.raises(ValueError, match="validation margin"):
        verdict(tasks, start, start, alpha=0.05, margin=-1)


def test_solved_tasks_outside_the_validation_tasks_are_an_error() -> None:
    with pytest.raises(ValueError, match="outside the validation tasks"):
        verdict(["a", "b"], ["a"], ["c"], alpha=0.05)
