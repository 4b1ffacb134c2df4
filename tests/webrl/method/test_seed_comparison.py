"""Settings compared over their seeds: seed-averaged per-task differences, resampled by template."""

from __future__ import annotations

import pytest

from webrl.method.paired_stats import cluster_bootstrap_differences, cluster_bootstrap_interval
from webrl.method.seed_comparison import (
    compare_over_seeds,
    seed_averaged_difference,
    success_matrix,
    template_movements,
)
from webrl.method.template_split import HELD_OUT, SEEN, TemplateGroups, group_comparison


def test_fractional_differences_resample_whole_templates() -> None:
    # template a: 2 tasks each gained in half the seeds (d = 0.5); template b: 2 tasks unchanged (d = 0).
    # Resamples aa, ab/ba, bb with probability 1/4, 1/2, 1/4 give 0.5, 0.25, 0: the interval is [0, 0.5]
    assert cluster_bootstrap_differences([0.5, 0.5, 0.0, 0.0], ["a", "a", "b", "b"]) == (0.0, 0.5)
    assert cluster_bootstrap_differences([], []) == (0.0, 0.0)


def test_one_seed_each_is_the_paired_template_comparison() -> None:
    tasks = [f"t/{i:02d}" for i in range(40)]
    template_of = {key: f"T{i // 4}" for i, key in enumerate(tasks)}
    groups = TemplateGroups(template_of, frozenset(f"T{j}" for j in range(8)))  # T8, T9 held out
    before = {key for i, key in enumerate(tasks) if i % 3 == 0}
    after = {key for i, key in enumerate(tasks) if i % 2 == 0 or i >= 32}
    paired = group_comparison(tasks, groups, before, after)
    seeds = compare_over_seeds(tasks, groups, [before], [after])
    for mine, theirs in ((seeds.overall, paired.overall), (seeds.seen, paired.seen),
                         (seeds.held_out, paired.held_out)):
        assert mine is not None and theirs is not None
        assert mine.difference == pytest.approx(theirs.difference)
        assert mine.interval == theirs.interval
        assert mine.gained_every_seed == theirs.gained and mine.lost_every_seed == theirs.lost
    assert cluster_bootstrap_interval([k in before for k in sorted(tasks)], [k in after for k in sorted(tasks)],
                                      [template_of[k] for k in sorted(tasks)]) == seeds.overall.interval


def test_a_setting_is_the_mean_of_its_seeds_and_only_agreeing_seeds_count_as_every_seed() -> None:
    tasks = ["a/1", "a/2", "b/1", "b/2"]
    template_of = {key: key.split("/")[0] for key in tasks}
    start = [{"b/2"}]
    seeds = [{"a/1", "a/2", "b/2"}, {"a/1", "b/1"}, {"a/1", "a/2"}]  # a/1 in every seed; b/2 lost in two of three
    got = seed_averaged_difference(tasks, template_of, start, seeds)
    # per task: a/1 1 - 0, a/2 2/3 - 0, b/1 1/3 - 0, b/2 1/3 - 1
    assert got.difference == pytest.approx((1 + 2 / 3 + 1 / 3 - 2 / 3) / 4)
    assert got.before == 0.25 and got.after == pytest.approx(7 / 12)
    assert got.per_seed_after == [0.75, 0.5, 0.5]
    assert got.gained_every_seed == ["a/1"] and got.lost_every_seed == []
    # the settings swapped: the difference changes sign and the every-seed sets follow
    back = seed_averaged_difference(tasks, template_of, seeds, start)
    assert back.difference == pytest.approx(-got.difference) and back.lost_every_seed == ["a/1"]
    assert back.interval == pytest.approx((-got.interval[1], -got.interval[0]))


def test_a_setting_needs_a_seed_and_a_comparison_needs_tasks() -> None:
    with pytest.raises(ValueError, match="at least one seed"):
        success_matrix(["t/1"], [])
    with pytest.raises(ValueError, match="no tasks"):
        seed_averaged_difference([], {}, [set()], [set()])


def test_template_movements_list_the_templates_a_cell_moved_those_most_often_lost_first() -> None:
    tasks = ["a/1", "a/2", "b/1", "c/1", "c/2", "d/1"]
    groups = TemplateGroups({key: key.split("/")[0] for key in tasks}, frozenset({"a", "b", "c"}))  # d held out
    start = {"a/1", "a/2", "b/1"}
    cells = [{"a/1", "b/1", "c/1"}, {"b/1", "d/1"}, {"a/1", "a/2", "b/1", "c/1", "c/2"}]
    moved = template_movements(tasks, groups, start, cells)
    # b never moves; a is below the start in two cells, c above it in two, d in one
    assert [m.template for m in moved] == ["a", "c", "d"]
    a, c, d = moved
    assert (a.start, a.per_cell, a.cells_below, a.cells_above) == (2, [1, 0, 2], 2, 0)
    assert (d.group, d.per_cell, d.cells_above) == (HELD_OUT, [0, 1, 0], 1)
    assert (c.group, c.tasks, c.per_cell, c.cells_above) == (SEEN, ["c/1", "c/2"], [1, 0, 2], 2)
    assert c.as_dict()["cells_below"] == 0
    assert template_movements(tasks, groups, start, [start]) == []
