"""Two actors compared on the same test tasks: which tasks one gained and lost against the other, the difference in
success rate with a 95% interval, and whether it could be chance.

Each task gives a pair (solved before, solved after), so the two success rates are not independent samples; only the
discordant tasks (gained: 0 -> 1, lost: 1 -> 0) carry information about the difference. The report
(:mod:`webrl.runs.report`) compares the last evaluated phase with the SFT actor this way.

    comparison = paired_comparison(tasks, solved_before, solved_after)
    comparison.difference, comparison.interval, comparison.p_value
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

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
    interval: tuple[float, float]  # 95% paired bootstrap interval of the difference
    interval_wald: tuple[float, float]  # 95% Wald interval for paired proportions, continuity-corrected
    p_value: float  # McNemar's exact two-sided test of "gains and losses are equally likely"


def mcnemar_exact_p(gained: int, lost: int) -> float:
    """McNemar's exact test: under "no difference" each discordant task is a gain or a loss with probability 1/2,
    so the smaller count is Binomial(gained + lost, 1/2); two-sided p = 2 P(X <= min(gained, lost)), at most 1
    (1.0 when no task is discordant)."""
    n = gained + lost
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


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
    d = np.asarray(after, dtype=np.int8) - np.asarray(before, dtype=np.int8)  # (n,) in {-1, 0, 1}
    if d.size == 0:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, d.size, size=(resamples, d.size))  # (R, n) task indices
    means = d[draws].mean(axis=1, dtype=np.float64)  # (R,) bootstrap differences
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return (float(low), float(high))


def paired_comparison(tasks: Collection[str], solved_before: Collection[str], solved_after: Collection[str],
                      resamples: int = RESAMPLES, seed: int = SEED) -> PairedComparison:
    """Compare two evaluations on ``tasks`` (the tasks both evaluated); solved keys outside ``tasks`` are ignored."""
    order = sorted(tasks)
    solved_b, solved_a = set(solved_before), set(solved_after)
    before = [key in solved_b for key in order]
    after = [key in solved_a for key in order]
    gained = [key for key, b, a in zip(order, before, after, strict=True) if a and not b]
    lost = [key for key, b, a in zip(order, before, after, strict=True) if b and not a]
    n = len(order)
    return PairedComparison(
        n=n, solved_before=sum(before), solved_after=sum(after), gained=gained, lost=lost,
        difference=(sum(after) - sum(before)) / n if n else 0.0,
        interval=bootstrap_interval(before, after, resamples, seed),
        interval_wald=wald_interval(len(gained), len(lost), n),
        p_value=mcnemar_exact_p(len(gained), len(lost)),
    )
