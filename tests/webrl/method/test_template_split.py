"""Success split by seen and held-out templates, and the macro average over templates, against counts by hand."""

from __future__ import annotations

import pytest

from webrl.method.paired_stats import cluster_bootstrap_interval
from webrl.method.template_split import HELD_OUT, SEEN, Share, TemplateGroups, group_comparison, group_success

#: 3 seen templates of 2 tasks (s0, s1, s2) and 1 held-out template of 4 tasks (h).
TEMPLATE_OF = {**{f"s/{i}": f"s{i // 2}" for i in range(6)}, **{f"h/{i}": "h" for i in range(4)}}
GROUPS = TemplateGroups(template_of=TEMPLATE_OF, seen=frozenset({"s0", "s1", "s2", "unused"}))


def test_tasks_are_split_by_whether_training_saw_their_template() -> None:
    assert GROUPS.split(["h/1", "s/0", "s/5"]) == {SEEN: ["s/0", "s/5"], HELD_OUT: ["h/1"]}
    assert GROUPS.group_of("h/0") == HELD_OUT and GROUPS.group_of("s/3") == SEEN
    assert GROUPS.covers(["s/0", "h/3"]) and not GROUPS.covers(["s/0", "x/1"]) and not GROUPS.covers([])


def test_group_success_by_hand() -> None:
    solved = {"s/0", "s/1", "s/2", "h/0", "other"}  # s0 2/2, s1 1/2, s2 0/2, h 1/4; "other" was not evaluated
    success = group_success(list(TEMPLATE_OF), GROUPS, solved)
    assert success.overall == Share(4, 10) and success.seen == Share(3, 6) and success.held_out == Share(1, 4)
    assert success.macro == pytest.approx((1 + 0.5 + 0 + 0.25) / 4)
    assert (success.templates, success.seen_templates, success.held_out_templates) == (4, 3, 1)
    assert success.seen.rate == 0.5 and Share(0, 0).rate is None


def test_group_comparison_compares_each_group_with_the_template_bootstrap() -> None:
    before = {"s/0", "s/1"}
    after = {"s/0", "h/0", "h/1", "h/2", "h/3"}  # the held-out template flips whole, s/1 is lost
    c = group_comparison(list(TEMPLATE_OF), GROUPS, before, after)
    assert c.overall.unit == "template" and c.overall.templates == 4
    assert (c.overall.gained, c.overall.lost) == (["h/0", "h/1", "h/2", "h/3"], ["s/1"])
    assert c.overall.difference == pytest.approx(3 / 10)
    assert c.overall.macro_difference == pytest.approx((-0.5 + 1) / 4)
    assert c.seen is not None and (c.seen.n, c.seen.gained, c.seen.lost) == (6, [], ["s/1"])
    assert c.held_out is not None and (c.held_out.n, c.held_out.difference) == (4, 1.0)
    # one held-out template: every resample draws it, so its interval is a point, not evidence of a sure gain
    assert c.held_out.interval == (1.0, 1.0) and c.held_out.templates == 1
    clusters = [TEMPLATE_OF[k] for k in sorted(TEMPLATE_OF)]
    flags = [[k in solved for k in sorted(TEMPLATE_OF)] for solved in (before, after)]
    assert c.overall.interval == cluster_bootstrap_interval(*flags, clusters)
    only_seen = group_comparison(["s/0", "s/1"], GROUPS, before, after)
    assert only_seen.held_out is None and only_seen.seen is not None
    record = c.as_dict()
    assert record["held_out"]["difference"] == 1.0 and record["seen"]["lost"] == ["s/1"]
    assert record["overall"]["macro_difference"] == pytest.approx(0.125) and record["overall"]["unit"] == "template"
    assert only_seen.as_dict()["held_out"] is None
