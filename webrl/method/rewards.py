"""Outcome reward and success, each decided once: the ORM service, the label store, the trainer, the evaluation
report and the ORM's own training all call these.

- reward = 1 if p >= threshold else 0, p = the ORM's P(YES) (docs/design.md step 3; paper section 3.1).
- An evaluator score (WebArena's are 0 or 1) or a 0/1 reward counts as a success when it is >= SUCCESS_SCORE.
"""

from __future__ import annotations

from webrl.method.hyperparams import DEFAULTS

#: An evaluator score or a reward at or above this is a success. Scores and rewards are 0/1, so any value in
#: (0, 1] gives the same split; 0.5 is the midpoint WebRL's scripts use (``build_rm_data``: YES when score > 0.5).
SUCCESS_SCORE = 0.5


def reward_of(p: float, threshold: float = DEFAULTS.reward.orm_threshold) -> float:
    """Outcome reward r = 1 if p >= threshold else 0 (``add_overall_reward`` in WebRL's scripts)."""
    return 1.0 if p >= threshold else 0.0


#: The label version of rewards the sandbox evaluators gave (a run without an ORM), beside the ORMs' versions.
EVALUATOR_LABELS = "env-evaluator"


def is_success(score: float) -> bool:
    """score >= :data:`SUCCESS_SCORE`: an evaluator score or a reward that counts as a solved task."""
    return score >= SUCCESS_SCORE
