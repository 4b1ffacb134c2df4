"""Test success split by whether training saw the task's intent template: seen, held-out, and the macro average.

The sandbox's test split (:mod:`webrl.sandbox.tasks.suite`) has 165 tasks: 85 new instantiations of 61 templates
that training also instantiates (1-2 tasks each) and 80 of 4 held-out templates no training task shares (20 each).
Overall success weighs each template by its tasks, so the 4 held-out templates are almost half of it; the macro
average (the mean of the per-template success rates) weighs every template the same. Tasks of one template succeed
or fail together, so every interval here is the template-cluster bootstrap of :mod:`webrl.method.paired_stats`.

    groups = TemplateGroups(template_of={task: template}, seen=frozenset(seen_templates))
    group_success(tasks, groups, solved)            # overall, seen, held-out and macro success
    group_comparison(tasks, groups, before, after)  # the same, before against after, with intervals
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from webrl.method.paired_stats import RESAMPLES, SEED, PairedComparison, macro_rate, paired_comparison

SEEN = "seen"
HELD_OUT = "held-out"


@dataclass(frozen=True)
class TemplateGroups:
    """Each test task's intent template and the templates training saw (any train-split task shares them)."""

    template_of: Mapping[str, str]  # test task key -> template
    seen: frozenset[str]  # templates of the train split

    def covers(self, tasks: Collection[str]) -> bool:
        """Whether every one of ``tasks`` has a known template (and there is at least one task)."""
        return bool(tasks) and all(key in self.template_of for key in tasks)

    def group_of(self, key: str) -> str:
        """:data:`SEEN` or :data:`HELD_OUT`."""
        return SEEN if self.template_of[key] in self.seen else HELD_OUT

    def split(self, tasks: Collection[str]) -> dict[str, list[str]]:
        """``tasks`` (sorted) by group: ``{SEEN: [...], HELD_OUT: [...]}``."""
        out: dict[str, list[str]] = {SEEN: [], HELD_OUT: []}
        for key in sorted(tasks):
            out[self.group_of(key)].append(key)
        return out

    def templates(self, tasks: Collection[str]) -> set[str]:
        return {self.template_of[key] for key in tasks}


@dataclass(frozen=True)
class Share:
    """``solved`` of ``n`` tasks."""

    solved: int
    n: int

    @property
    def rate(self) -> float | None:
        return self.solved / self.n if self.n else None


@dataclass(frozen=True)
class GroupSuccess:
    """One evaluation's success on its tasks: overall, per group and the macro average over templates."""

    overall: Share
    seen: Share
    held_out: Share
    macro: float  # mean over the templates of each template's success rate
    templates: int
    seen_templates: int
    held_out_templates: int


def group_success(tasks: Collection[str], groups: TemplateGroups, solved: Collection[str]) -> GroupSuccess:
    """Success of ``solved`` on ``tasks`` (every one with a known template), overall, seen, held-out and macro."""
    solved_set = set(solved)
    by_group = groups.split(tasks)

    def share(keys: Collection[str]) -> Share:
        return Share(sum(key in solved_set for key in keys), len(keys))

    order = sorted(tasks)
    return GroupSuccess(
        overall=share(order), seen=share(by_group[SEEN]), held_out=share(by_group[HELD_OUT]),
        macro=macro_rate([key in solved_set for key in order], [groups.template_of[key] for key in order]),
        templates=len(groups.templates(order)), seen_templates=len(groups.templates(by_group[SEEN])),
        held_out_templates=len(groups.templates(by_group[HELD_OUT])))


@dataclass(frozen=True)
class GroupComparison:
    """After against before on the same tasks, each a template-cluster bootstrap comparison: over all the tasks
    (with the macro average over templates), and over the seen-template and held-out-template tasks alone (None
    when the tasks hold none of that group)."""

    overall: PairedComparison
    seen: PairedComparison | None
    held_out: PairedComparison | None

    def as_dict(self) -> dict[str, Any]:
        """``{"overall": ..., "seen": ..., "held_out": ...}``, each :meth:`PairedComparison.as_dict` or None."""
        return {name: c.as_dict() if c is not None else None
                for name, c in (("overall", self.overall), ("seen", self.seen), ("held_out", self.held_out))}


def group_comparison(tasks: Collection[str], groups: TemplateGroups, solved_before: Collection[str],
                     solved_after: Collection[str], resamples: int = RESAMPLES, seed: int = SEED) -> GroupComparison:
    """:class:`GroupComparison` of two evaluations on ``tasks`` (every one with a known template)."""
    by_group = groups.split(tasks)

    def compare(keys: Collection[str]) -> PairedComparison | None:
        if not keys:
            return None
        return paired_comparison(keys, solved_before, solved_after, resamples, seed, template_of=groups.template_of)

    overall = compare(list(tasks))
    assert overall is not None, "no tasks to compare"
    return GroupComparison(overall=overall, seen=compare(by_group[SEEN]), held_out=compare(by_group[HELD_OUT]))
