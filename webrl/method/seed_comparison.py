"""Two settings compared over several seeds each, on the same test tasks, with templates as the resampled unit.

One seed of an update is one draw: on one stored phase the order of its batches alone moved 15-16 of the 165 test
tasks (docs/runs/2026-12-04-phase-offline-clip-seeds). A setting is therefore compared as the mean over its seeds.
Each task i gets the difference of its mean success under the two settings,

    d_i = mean_s after_{i,s} - mean_s before_{i,s}       (s over each setting's own seeds; a fixed baseline: 1 seed)

and the difference in success is mean_i d_i, with the 95% interval of a bootstrap that draws templates, each with all
its tasks' d_i (:func:`webrl.method.paired_stats.cluster_bootstrap_differences`), overall and within the seen-template
and held-out-template tasks (:mod:`webrl.method.template_split`). Tasks gained (lost) in every seed are those solved
by the first setting in none (all) of its seeds and by the second in all (none): the reproducible part of a change.

    compare_over_seeds(tasks, groups, before=[sft_solved], after=[seed0_solved, seed1_solved, seed2_solved])
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from webrl.method.paired_stats import RESAMPLES, SEED, cluster_bootstrap_differences
from webrl.method.template_split import HELD_OUT, SEEN, TemplateGroups


@dataclass(frozen=True)
class SeedAveragedDifference:
    """``after`` minus ``before`` over ``n`` tasks, each setting averaged over its seeds."""

    n: int
    before: float  # mean success of ``before`` over its seeds
    after: float  # ... of ``after``
    difference: float  # after - before, in [-1, 1]
    interval: tuple[float, float]  # 95% template-cluster bootstrap interval of the difference
    per_seed_after: list[float]  # success of each of ``after``'s seeds, in the order given
    gained_every_seed: list[str]  # solved by no seed of ``before`` and by every seed of ``after`` (sorted)
    lost_every_seed: list[str]  # solved by every seed of ``before`` and by no seed of ``after`` (sorted)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SeedComparison:
    """The seed-averaged difference overall and within each template group (None: the tasks hold none of it)."""

    overall: SeedAveragedDifference
    seen: SeedAveragedDifference | None
    held_out: SeedAveragedDifference | None

    def as_dict(self) -> dict[str, Any]:
        return {name: part.as_dict() if part is not None else None
                for name, part in (("overall", self.overall), ("seen", self.seen), ("held_out", self.held_out))}


def success_matrix(tasks: Sequence[str], solved_per_seed: Sequence[Collection[str]]) -> np.ndarray:
    """(seeds, tasks) of 0/1: whether each seed's evaluation solved each of ``tasks``."""
    if not solved_per_seed:
        raise ValueError("a setting needs at least one seed's evaluation")
    sets = [set(solved) for solved in solved_per_seed]
    return np.array([[key in solved for key in tasks] for solved in sets], dtype=np.float64)


def seed_averaged_difference(tasks: Collection[str], template_of: Mapping[str, str],
                             before: Sequence[Collection[str]], after: Sequence[Collection[str]],
                             resamples: int = RESAMPLES, seed: int = SEED) -> SeedAveragedDifference:
    """:class:`SeedAveragedDifference` of ``after`` (one solved set per seed) against ``before`` on ``tasks``."""
    order = sorted(tasks)
    if not order:
        raise ValueError("no tasks to compare")
    b, a = success_matrix(order, before), success_matrix(order, after)  # (S_b, n), (S_a, n)
    d = a.mean(axis=0) - b.mean(axis=0)  # (n,) seed-averaged difference per task
    clusters = [template_of.get(key, key) for key in order]
    never_before, always_before = b.max(axis=0) == 0, b.min(axis=0) == 1
    always_after, never_after = a.min(axis=0) == 1, a.max(axis=0) == 0
    return SeedAveragedDifference(
        n=len(order), before=float(b.mean()), after=float(a.mean()), difference=float(d.mean()),
        interval=cluster_bootstrap_differences(d, clusters, resamples, seed),
        per_seed_after=[float(row.mean()) for row in a],
        gained_every_seed=[k for k, g in zip(order, never_before & always_after, strict=True) if g],
        lost_every_seed=[k for k, lost in zip(order, always_before & never_after, strict=True) if lost])


def compare_over_seeds(tasks: Collection[str], groups: TemplateGroups, before: Sequence[Collection[str]],
                       after: Sequence[Collection[str]], resamples: int = RESAMPLES,
                       seed: int = SEED) -> SeedComparison:
    """:class:`SeedComparison` of two settings' seeds on ``tasks`` (every one with a known template)."""
    by_group = groups.split(tasks)

    def part(keys: Collection[str]) -> SeedAveragedDifference | None:
        if not keys:
            return None
        return seed_averaged_difference(keys, groups.template_of, before, after, resamples, seed)

    overall = part(list(tasks))
    assert overall is not None, "no tasks to compare"
    return SeedComparison(overall=overall, seen=part(by_group[SEEN]), held_out=part(by_group[HELD_OUT]))


@dataclass(frozen=True)
class TemplateMovement:
    """One template's solved tasks under the start actor and under each cell (one adapter's evaluation)."""

    template: str
    group: str  # SEEN or HELD_OUT
    tasks: list[str]  # the template's evaluated tasks (sorted)
    start: int  # solved by the start actor
    per_cell: list[int]  # solved by each cell, in the order given

    @property
    def cells_below(self) -> int:
        """Cells that solved fewer of the template's tasks than the start actor."""
        return sum(n < self.start for n in self.per_cell)

    @property
    def cells_above(self) -> int:
        return sum(n > self.start for n in self.per_cell)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cells_below": self.cells_below, "cells_above": self.cells_above}


def task_numbers(keys: Collection[str]) -> str:
    """``sandbox/test/86``, ``sandbox/test/147`` -> ``86, 147``; more than three -> the first three and how many more
    (``9, 20, 86 and 1 more``: a held-out template's 20 tasks are not consecutive, so no range is implied)."""
    names = sorted((key.rsplit("/", 1)[-1] for key in keys), key=lambda n: (len(n), n))  # numbers in numeric order
    return ", ".join(names) if len(names) <= 3 else f"{', '.join(names[:3])} and {len(names) - 3} more"


def template_movements(tasks: Collection[str], groups: TemplateGroups, start: Collection[str],
                       cells: Sequence[Collection[str]]) -> list[TemplateMovement]:
    """The templates on which at least one cell solved another number of tasks than the start actor, those most
    often below it first, then those most often above it. Across updates of different stored phases from one start
    actor, it separates what the data decides (a template gained under one phase's data, in every seed, and not under
    another's) from what every update does (a template the start actor solves narrowly, lost whatever the data)."""
    start_set, cell_sets = set(start), [set(solved) for solved in cells]
    by_template: dict[str, list[str]] = {}
    for key in sorted(tasks):
        by_template.setdefault(groups.template_of[key], []).append(key)
    moved = []
    for template, keys in by_template.items():
        before = sum(key in start_set for key in keys)
        after = [sum(key in solved for key in keys) for solved in cell_sets]
        if any(n != before for n in after):
            moved.append(TemplateMovement(template, groups.group_of(keys[0]), keys, before, after))
    return sorted(moved, key=lambda m: (-m.cells_below, -m.cells_above, m.group, m.tasks[0]))
