"""Whether a phase's updated actor is published: its greedy episodes on a fixed sample of training-split tasks
against those of the actor it started from (``evaluation.validation_tasks``; this project's, not in the paper).

Each validation task gives a pair (solved by the start actor, solved by the updated one); only the discordant tasks
carry evidence (:mod:`webrl.method.paired_stats`). Under "the update changed nothing" each of them is a loss or a
gain with probability 1/2, so the losses are Binomial(gained + lost, 1/2), and the one-sided sign test

    p = P(X >= lost),  X ~ Binomial(gained + lost, 1/2)

is the chance of losing at least that many by luck. The update is refused when p < alpha: the actor lost
significantly more tasks it used to solve than it gained, which is how an update on a handful of successes
collapses (the stop action learned from one episode and taken everywhere). An update that churns, gaining about as
many as it loses, is published: the gate stops a collapse, not an update whose value shows on other templates.

On 40 tasks the sign test needs five unanswered losses to refuse, so an update that gains 2 and loses 8 passes
(p = 0.055). The optional non-inferiority margin k (``evaluation.validation_margin``) refuses as well any update
whose net loss exceeds it:

    refused  <=>  p < alpha  or  lost - gained > k

that is, the updated actor must solve at least ``start_solved - k`` of the validation tasks.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from webrl.method.paired_stats import sign_test_tail


def losses_p(gained: int, lost: int) -> float:
    """One-sided sign test: P(X >= lost) for X ~ Binomial(gained + lost, 1/2); 1.0 when no task is discordant."""
    return sign_test_tail(gained + lost, lost)


@dataclass(frozen=True)
class Verdict:
    """The updated actor against its start actor on the validation tasks."""

    tasks: int
    start_solved: int
    solved: int
    gained: int
    lost: int
    p: float
    """:func:`losses_p` of ``gained`` and ``lost``."""
    alpha: float
    """The sign test's level."""
    margin: int | None
    """The non-inferiority margin in tasks (None: the sign test alone)."""
    accepted: bool
    """False when ``p`` < alpha or ``lost - gained`` > ``margin``: the start actor is published again."""
    refused_by: str | None
    """Which rule refused the update: "sign test" (whether or not the margin would have), "margin" (the sign test
    let it through), or None when it was published."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def verdict(tasks: Collection[str], start_solved: Collection[str], solved: Collection[str],
            alpha: float, margin: int | None = None) -> Verdict:
    """The sign test of ``solved`` (the updated actor's solved tasks among ``tasks``) against ``start_solved``, and
    the non-inferiority ``margin`` (net tasks lost) where one is given."""
    if margin is not None and margin < 0:
        raise ValueError(f"the validation margin is a number of tasks >= 0, not {margin}")
    keys, before, after = set(tasks), set(start_solved), set(solved)
    if not (before | after) <= keys:
        raise ValueError(f"solved tasks outside the validation tasks: {sorted((before | after) - keys)[:5]}")
    gained, lost = len(after - before), len(before - after)
    p = losses_p(gained, lost)
    beyond_margin = margin is not None and lost - gained > margin
    refused_by = "sign test" if p < alpha else "margin" if beyond_margin else None
    return Verdict(tasks=len(keys), start_solved=len(before), solved=len(after), gained=gained, lost=lost,
                   p=round(p, 6), alpha=alpha, margin=margin, accepted=refused_by is None, refused_by=refused_by)
