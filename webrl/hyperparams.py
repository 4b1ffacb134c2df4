"""WebRL's hyperparameters: one frozen record, grouped by the stage of the method that reads them.

Every field's default is the paper's value (arXiv 2411.02337) or, where the paper is silent, the published
code's; its docstring says which. :data:`PAPER` is the record with every default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ConfigDict

#: Unknown keys are errors when a record is read from JSON (a job payload, a stored run).
_FORBID_EXTRA = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Curriculum:
    """Step 1: which generated tasks a phase keeps."""

    __pydantic_config__ = _FORBID_EXTRA

    value_low: float = 0.05
    """Keep a task when the critic's V(start) >= this: not hopeless (paper section 3.2: [0.05, 0.75])."""
    value_high: float = 0.75
    """... and V(start) <= this: not solved already (paper section 3.2)."""


@dataclass(frozen=True)
class Reward:
    """Step 3: the outcome reward of a trajectory from the ORM's P(YES)."""

    __pydantic_config__ = _FORBID_EXTRA

    orm_threshold: float = 0.5
    """reward = 1 if P(YES) >= this (paper section 3.1; published code ``add_overall_reward``)."""


@dataclass(frozen=True)
class Replay:
    """Step 4: successful steps of earlier phases, filtered by the current actor's confidence c = exp(lp / n)."""

    __pydantic_config__ = _FORBID_EXTRA

    confidence_low: float = 0.5
    """Keep a replayed step when c > this (paper section 3.3; published code ``rank_score <= 0.5: continue``)."""
    confidence_high: float = 0.95
    """... and c <= this: the actor has not learnt it yet (paper section 3.3; published code ``<= 0.95``)."""
    cap_ratio: int = 2
    """At most this many replayed steps per current step (published code ``2 * len(current)``, not in the paper)."""


@dataclass(frozen=True)
class WebRLHyperparams:
    """Every knob of the method, by stage."""

    __pydantic_config__ = _FORBID_EXTRA

    curriculum: Curriculum = field(default_factory=Curriculum)
    reward: Reward = field(default_factory=Reward)
    replay: Replay = field(default_factory=Replay)


#: The paper's (and, where it is silent, the published code's) values.
PAPER = WebRLHyperparams()
