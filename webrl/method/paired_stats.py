"""Two actors compared on the same test tasks: which tasks one gained and lost against the other, the difference in
success rate with a 95% interval, and whether it could be chance.

Each task gives a pair (solved before, solved after), so the two success rates are not independent samples; only the
discordant tasks (gained: 0 -> 1, lost: 1 -> 0) carry information about the difference. The report
(:mod:`webrl.runs.report`) compares the last evaluated phase with the SFT actor this way.

Tasks of one intent template succeed or fail together (the sandbox's test split: 80 of its 165 tasks are 4 held-out
templates of 20), so resampling tasks as if independent gives an interval narrower than the evidence. Given each
task's template (``template_of``), the interval is a cluster bootstrap: templates are drawn with replacement, each
with all its tasks' pairs (:func:`cluster_bootstrap_interval`), and the macro average over templates is compared too.

    comparison = paired_comparison(tasks, solved_before, solved_after, template_of=template_of)
    comparison.difference, comparison.interval, comparison.macro_difference, comparison.interval_macro
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

RESAMPLES = 10_000  # paired bootstrap resamples: the 2.5% and 97.5% quantiles move by < 0.5 points at n = 165
SEED = 0  # the bootstrap's generator: the report's interval is the same every time it is written
LEVEL = 0.95  # the intervals' coverage
Z_95 = 1.959964  # standard normal quantile at 0.975, for the continuity-corrected Wald interval


@dataclass(frozen=True)
class PairedComparison:
    """``after`` against ``before`` on the ``n`` tasks both evaluated."""

    n: int
    solved_before: int
    solved_after: int
    gained: list[str]  # tasks solved after and not before (sorted)
    lost: list[str]  # tasks solved before and not after (sorted)
    difference: float  # success after - success before, in [-1, 1]
    interval: tuple[float, float]  # 95% paired bootstrap interval of the difference (``unit`` its resampled unit)
    interval_wald: tuple[float, float]  # 95% Wald interval for paired proportions, continuity-corrected (tasks)
    p_value: float  # McNemar's exact two-sided test of "gains and losses are equally likely" (tasks independent)
    unit: str = "task"  # what the bootstrap drew: "task", or "template" (a template's tasks drawn together)
    templates: int | None = None  # the templates of the n tasks (None: templates unknown)
    macro_before: float | None = None  # mean over the templates of each template's success before
    macro_after: float | None = None  # ... and after
    interval_macro: tuple[float, float] | None = None  # 95% template bootstrap interval of the macro difference

    @property
    def macro_difference(self) -> float | None:
        """Macro success after - before (each template weighs the same); None when templates are unknown."""
        if self.macro_before is None or self.macro_after is None:
            return None
        return self.macro_after - self.macro_before

    def as_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready fields (intervals as [low, high]), the macro difference among them."""
        return {**asdict(self), "macro_difference": self.macro_difference}


def sign_test_tail(n: int, at_least: int) -> float:
    """P(X >= at_least) for X ~ Binomial(n, 1/2): the chance of at least that many of ``n`` discordant tasks going
    one way when gains and losses are equally likely (1.0 when ``at_least`` <= 0)."""
    return sum(math.comb(n, k) for k in range(max(0, at_least), n + 1)) / 2**n


def mcnemar_exact_p(gained: int, lost: int) -> float:
    """McNemar's exact test: under "no difference" each discordant task is a gain or a loss with probability 1/2,
    so each count is Binomial(gained + lost, 1/2); two-sided p = 2 P(X >= max(gained, lost)), at most 1
    (1.0 when no task is discordant)."""
    return min(1.0, 2 * sign_test_tail(gained + lost, max(gained, lost)))


def wald_interval(gained: int, lost: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wald interval of the paired difference (gained - lost) / n with the continuity correction 1/n (Fleiss,
    Levin & Paik, *Statistical Methods for Rates and Proportions*, 3rd ed., section 13.1), clipped to [-1, 1]."""
    if n == 0:
        return (0.0, 0.0)
    difference = (gained - lost) / n
    se = math.sqrt(max(0.0, (gained + lost) - (gained - lost) ** 2 / n)) / n
    half = z * se + 1 / n
    return (max(-1.0, difference - half), min(1.0, difference + half))


def bootstrap_interval(before: Sequence[bool], after: Sequence[bool], resamples: int = RESAMPLES,
                       seed: int = SEED, level: float = LEVEL) -> tuple[float, float]:
    """Percentile interval of the difference in success from a paired bootstrap: tasks are drawn with replacement
    and each keeps its (before, after) pair (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13)."""
    d = _differences(before, after)
    if d.size == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, d.size, size=(resamples, d.size))  # (R, n) task indices
    return _percentiles(d[draws].mean(axis=1, dtype=np.float64), level)  # (R,) bootstrap differences


def _differences(before: Sequence[bool], after: Sequence[bool]) -> np.ndarray:
    """after - before per task, (n,) in {-1, 0, 1}."""
    return np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)


def _percentiles(statistics: np.ndarray, level: float) -> tuple[float, float]:
    """The percentile interval of bootstrap ``statistics`` at coverage ``level``."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(statistics, [tail, 100 - tail])
    return (float(low), float(high))


def cluster_totals(values: np.ndarray, clusters: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(sum of ``values``, number of tasks) per cluster, clusters in sorted order."""
    _, index = np.unique(np.asarray(clusters, dtype=str), return_inverse=True)
    return np.bincount(index, weights=values), np.bincount(index).astype(np.float64)


def cluster_bootstrap_interval(before: Sequence[bool], after: Sequence[bool], clusters: Sequence[str],
                               resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
                               macro: bool = False) -> tuple[float, float]:
    """Percentile interval of the difference in success from a cluster bootstrap: the G clusters (templates) are
    drawn G times with replacement and each keeps all its tasks' (before, after) pairs (Davison & Hinkley,
    *Bootstrap Methods and their Application*, 1997, section 3.8, "stratified and hierarchical data"; Field &
    Welsh, JRSS B 69(3), 2007). The statistic of a resample is the difference in success over the drawn tasks,
    sum(d) / sum(n) over the drawn clusters, or with ``macro`` the mean of the drawn clusters' own differences."""
    return cluster_bootstrap_differences(_differences(before, after), clusters, resamples, seed, level, macro)


def cluster_bootstrap_differences(differences: Sequence[float] | np.ndarray, clusters: Sequence[str],
                                  resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
                                  macro: bool = False) -> tuple[float, float]:
    """:func:`cluster_bootstrap_interval` of per-task differences that need not be -1, 0 or 1: a task's difference
    averaged over several seeds of each setting, ``d_i = mean_s(after_{i,s}) - mean_s(before_{i,s})``, so that the
    seeds of a setting are compared as one setting and templates stay the resampled unit."""
    d = np.asarray(differences, dtype=np.float64)
    if d.size == 0:
        return (0.0, 0.0)
    sums, counts = cluster_totals(d, clusters)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, sums.size, size=(resamples, sums.size))  # (R, G) cluster indices
    if macro:
        return _percentiles((sums / counts)[draws].mean(axis=1), level)
    return _percentiles(sums[draws].sum(axis=1) / counts[draws].sum(axis=1), level)


def macro_rate(solved: Sequence[bool], clusters: Sequence[str]) -> float:
    """The mean over clusters of each cluster's success rate (0.0 without tasks)."""
    if not solved:
        return 0.0
    sums, counts = cluster_totals(np.asarray(solved, dtype=np.float64), clusters)
    return float((sums / counts).mean())


def paired_comparison(tasks: Collection[str], solved_before: Collection[str], solved_after: Collection[str],
                      resamples: int = RESAMPLES, seed: int = SEED,
                      template_of: Mapping[str, str] | None = None) -> PairedComparison:
    """Compare two evaluations on ``tasks`` (the tasks both evaluated); solved keys outside ``tasks`` are ignored.
    With ``template_of`` (task -> template) the interval is the template-cluster bootstrap and the macro average
    over templates is compared too; a task it does not name is a template of its own."""
    order = sorted(tasks)
    solved_b, solved_a = set(solved_before), set(solved_after)
    before = [key in solved_b for key in order]
    after = [key in solved_a for key in order]
    gained = [key for key, b, a in zip(order, before, after, strict=True) if a and not b]
    lost = [key for key, b, a in zip(order, before, after, strict=True) if b and not a]
    n = len(order)
    comparison = PairedComparison(
        n=n, solved_before=sum(before), solved_after=sum(after), gained=gained, lost=lost,
        difference=(sum(after) - sum(before)) / n if n else 0.0,
        interval=bootstrap_interval(before, after, resamples, seed),
        interval_wald=wald_interval(len(gained), len(lost), n),
        p_value=mcnemar_exact_p(len(gained), len(lost)),
    )
    if template_of is None:
        return comparison
    clusters = [template_of.get(key, key) for key in order]
    return replace(
        comparison, unit="template", templates=len(set(clusters)),
        interval=cluster_bootstrap_interval(before, after, clusters, resamples, seed),
        macro_before=macro_rate(before, clusters), macro_after=macro_rate(after, clusters),
        interval_macro=cluster_bootstrap_interval(before, after, clusters, resamples, seed, macro=True))
