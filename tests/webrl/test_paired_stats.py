"""Paired comparison of two evaluations on the same tasks, against numbers computed by hand."""

from __future__ import annotations

import pytest

from webrl.method.paired_stats import bootstrap_interval, mcnemar_exact_p, paired_comparison, wald_interval


def test_mcnemar_exact_p_by_hand() -> None:
    # 18 gained, 7 lost: P(X <= 7), X ~ Bin(25, 1/2) = (1 + 25 + 300 + 2300 + 12650 + 53130 + 177100 + 480700) / 2^25
    assert mcnemar_exact_p(18, 7) == pytest.approx(2 * 726_206 / 2**25)  # 0.0433
    assert mcnemar_exact_p(7, 18) == mcnemar_exact_p(18, 7)
    assert mcnemar_exact_p(3, 0) == pytest.approx(2 / 8)  # P(X <= 0) = 1/8, doubled
    assert mcnemar_exact_p(2, 2) == 1.0  # 2 * (1 + 4 + 6) / 16 = 1.375, capped
    assert mcnemar_exact_p(0, 0) == 1.0  # no discordant task: no evidence


def test_wald_interval_with_continuity_correction_by_hand() -> None:
    # d = 11/165; se = sqrt(25 - 11^2/165) / 165 = 0.0298553; half = 1.959964 * se + 1/165 = 0.0645765
    low, high = wald_interval(18, 7, 165)
    assert (low, high) == (pytest.approx(0.0666667 - 0.0645765, abs=1e-6), pytest.approx(0.0666667 + 0.0645765,
                                                                                         abs=1e-6))
    assert wald_interval(0, 0, 10) == (pytest.approx(-0.1), pytest.approx(0.1))  # only the correction: +-1/n
    assert wald_interval(5, 0, 5) == (pytest.approx(0.8), 1.0)  # clipped at 1
    assert wald_interval(0, 0, 0) == (0.0, 0.0)


def test_paired_bootstrap_interval() -> None:
    # two tasks, one gained: a resample's difference is 0, 1/2 or 1 with probability 1/4, 1/2, 1/4, so its 2.5% and
    # 97.5% quantiles are 0 and 1
    assert bootstrap_interval([False, False], [True, False]) == (0.0, 1.0)
    assert bootstrap_interval([True] * 4, [True] * 4) == (0.0, 0.0)  # no discordant task: no spread
    assert bootstrap_interval([False] * 3, [True] * 3) == (1.0, 1.0)
    assert bootstrap_interval([], []) == (0.0, 0.0)
    before, after = [True] * 25 + [False] * 140, [False] * 7 + [True] * 36 + [False] * 122  # 18 gained, 7 lost
    low, high = bootstrap_interval(before, after)
    assert bootstrap_interval(before, after) == (low, high)  # seeded
    # the bootstrap's spread is the paired standard error sqrt(25/165 - (11/165)^2) / sqrt(165) = 0.0296
    assert low == pytest.approx(11 / 165 - 1.96 * 0.0296, abs=0.006)
    assert high == pytest.approx(11 / 165 + 1.96 * 0.0296, abs=0.006)


def test_paired_comparison_counts_only_the_shared_tasks() -> None:
    tasks = ["t/1", "t/2", "t/3", "t/4"]
    comparison = paired_comparison(tasks, solved_before={"t/1", "t/2", "t/9"}, solved_after={"t/2", "t/3", "t/4"})
    assert (comparison.n, comparison.solved_before, comparison.solved_after) == (4, 2, 3)  # t/9 was not shared
    assert (comparison.gained, comparison.lost) == (["t/3", "t/4"], ["t/1"])
    assert comparison.difference == pytest.approx(0.25)
    assert comparison.p_value == 1.0  # 2 * (1 + 3) / 8
    assert comparison.interval[0] <= 0.25 <= comparison.interval[1]
