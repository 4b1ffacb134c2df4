"""Paired comparison of two evaluations on the same tasks, against numbers computed by hand."""

from __future__ import annotations

import pytest

from webrl.method.paired_stats import (
    bootstrap_interval,
    mcnemar_exact_p,
    paired_comparison,
    sign_test_tail,
    wald_interval,
)


def test_sign_test_tail_by_hand() -> None:
    assert sign_test_tail(5, 5) == 1 / 32
    assert sign_test_tail(4, 3) == pytest.approx((4 + 1) / 16)
    assert sign_test_tail(6, 0) == 1.0
    assert sign_test_tail(6, -2) == 1.0  # "at least a negative count" is certain
    assert sign_test_tail(0, 0) == 1.0
    assert sign_test_tail(3, 4) == 0.0  # more than n: impossible


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


def _four_templates_one_flips() -> tuple[list[bool], list[bool], list[str]]:
    """4 templates of 20 tasks; template "c" goes 0 -> 1 entirely, "a" is solved before and after, "b" and "d"
    never."""
    clusters = [name for name in "abcd" for _ in range(20)]
    before = [c == "a" for c in clusters]
    after = [c in "ac" for c in clusters]
    return before, after, clusters


def test_the_template_bootstrap_is_as_wide_as_one_flipped_template_of_four() -> None:
    from webrl.method.paired_stats import cluster_bootstrap_interval

    before, after, clusters = _four_templates_one_flips()
    # over tasks: 20 gains of 80, d = 0.25 with se sqrt(0.25 * 0.75 / 80) = 0.048: the interval excludes 0
    low, high = bootstrap_interval(before, after)
    assert 0.14 < low < 0.18 and 0.32 < high < 0.36
    # over templates: a resample draws the flipped template k ~ Bin(4, 1/4) times and its difference is 20k / 80;
    # P(k = 0) = 81/256 > 2.5% and P(k <= 2) = 243/256 < 97.5% < P(k <= 3) = 255/256, so the interval is [0, 3/4]
    assert cluster_bootstrap_interval(before, after, clusters) == (0.0, 0.75)
    assert cluster_bootstrap_interval(before, after, clusters, macro=True) == (0.0, 0.75)  # equal sizes: the same
    assert cluster_bootstrap_interval(before, after, clusters) == cluster_bootstrap_interval(before, after, clusters)


def test_the_macro_statistic_weighs_each_template_the_same() -> None:
    from webrl.method.paired_stats import cluster_bootstrap_interval, macro_rate

    # template A: 3 tasks all gained; template B: 1 task never solved. Pooled d = 3/4, macro d = (1 + 0) / 2.
    # Resamples: AA, AB/BA, BB with probability 1/4, 1/2, 1/4; pooled 1, 3/4, 0; macro 1, 1/2, 0
    clusters, before, after = ["A", "A", "A", "B"], [False] * 4, [True, True, True, False]
    assert macro_rate(after, clusters) == 0.5 and macro_rate(before, clusters) == 0.0
    assert macro_rate([], []) == 0.0
    assert cluster_bootstrap_interval(before, after, clusters) == (0.0, 1.0)
    assert cluster_bootstrap_interval(before, after, clusters, macro=True) == (0.0, 1.0)
    assert cluster_bootstrap_interval([], [], []) == (0.0, 0.0)


def test_many_small_templates_give_about_the_task_bootstrap() -> None:
    from webrl.method.paired_stats import cluster_bootstrap_interval

    n = 160  # 80 templates of 2 tasks, gains and losses spread over them
    before = [i % 11 == 0 for i in range(n)]
    after = [i % 7 == 0 for i in range(n)]
    clusters = [f"t{i // 2}" for i in range(n)]
    by_task = bootstrap_interval(before, after)
    by_template = cluster_bootstrap_interval(before, after, clusters)
    assert by_task[0] < 0 < by_task[1]
    assert by_template == (pytest.approx(by_task[0], abs=0.02), pytest.approx(by_task[1], abs=0.02))


def test_paired_comparison_with_templates_resamples_templates() -> None:
    from webrl.method.paired_stats import cluster_bootstrap_interval

    before, after, clusters = _four_templates_one_flips()
    tasks = [f"t/{i:02d}" for i in range(80)]
    solved_before = {t for t, b in zip(tasks, before, strict=True) if b}
    solved_after = {t for t, a in zip(tasks, after, strict=True) if a}
    by_task = paired_comparison(tasks, solved_before, solved_after)
    by_template = paired_comparison(tasks, solved_before, solved_after,
                                    template_of=dict(zip(tasks, clusters, strict=True)))
    assert (by_task.unit, by_task.templates, by_task.macro_difference) == ("task", None, None)
    assert by_task.interval[0] > 0  # the task bootstrap calls one template's flip certain
    assert (by_template.unit, by_template.templates) == ("template", 4)
    assert by_template.interval == cluster_bootstrap_interval(before, after, clusters) == (0.0, 0.75)
    assert by_template.interval_macro == (0.0, 0.75)
    assert (by_template.macro_before, by_template.macro_after) == (0.25, 0.5)
    assert by_template.macro_difference == 0.25 and by_template.difference == 0.25
    assert by_template.gained == tasks[40:60] and by_template.lost == [] == by_task.lost
    # a task the mapping does not name is a template of its own
    alone = paired_comparison(tasks[:2], set(), {"t/00"}, template_of={})
    assert alone.templates == 2 and alone.macro_after == 0.5
