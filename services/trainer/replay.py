"""The replay buffer with actor-confidence filtering (DESIGN.md step 4; paper §3.3, "experience replay
buffer with actor confidence filtering").

From earlier phases, the first successful trajectory per task (``data.first_success_examples``); keep a
step when the current actor's confidence in its action, c = 1/perplexity = exp(lp / n), lies in
(LOW, HIGH]; keep at most CAP_RATIO x the current phase's step count; mix with the current steps; shuffle.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from services.trainer.data import SequenceItem, StepExample, encode_action, sequence_collate
from services.trainer.loop import evaluate, prepared_loader
from webrl.models.examples import pad_id_of
from webrl.models.logprobs import confidence, sequence_logprobs

#: Lower bound (exclusive) of 1/perplexity: below it the actor finds the old action too unfamiliar to learn
#: from safely. Published code (``if item['rank_score'] <= 0.5: continue``).
CONFIDENCE_LOW = 0.5
#: Upper bound (inclusive): above it the actor already knows the action and it teaches nothing.
#: Published code (``if item['rank_score'] <= 0.95``).
CONFIDENCE_HIGH = 0.95
#: At most this many replayed steps per current-phase step. Published code (``num = 2 * len(current)``).
CAP_RATIO = 2


def keep_confident(scores: Sequence[float], low: float = CONFIDENCE_LOW, high: float = CONFIDENCE_HIGH) -> list[bool]:
    """keep_i = low < c_i <= high."""
    return [low < c <= high for c in scores]


def select_replay(candidates: Sequence[StepExample], scores: Sequence[float], n_current: int, *, seed: int = 0,
                  low: float = CONFIDENCE_LOW, high: float = CONFIDENCE_HIGH,
                  cap_ratio: int = CAP_RATIO) -> list[StepExample]:
    """Shuffle the candidates, keep the confident ones, cap at ``cap_ratio * n_current``
    (the published order: shuffle, filter, take the first min(kept, cap))."""
    if len(candidates) != len(scores):
        raise ValueError(f"{len(candidates)} candidates but {len(scores)} scores")
    order = list(range(len(candidates)))
    random.Random(seed).shuffle(order)
    kept = [candidates[i] for i in order if low < scores[i] <= high]
    return kept[: cap_ratio * n_current]


def build_experience(current: Sequence[StepExample], replayed: Sequence[StepExample], *, seed: int = 0
                     ) -> list[StepExample]:
    """This phase's steps plus the replayed ones, shuffled."""
    mixed = [*current, *replayed]
    random.Random(seed + 1).shuffle(mixed)
    return mixed


def score_confidence(accelerator: Any, model: Any, tokenizer: Any, examples: Sequence[StepExample], *,
                     batch_size: int, max_length: int | None) -> list[float]:
    """c = exp(lp / n) of each example's action under ``model`` (prepared by ``accelerator``), in order."""
    if not examples:
        return []
    items = [SequenceItem(i, encode_action(tokenizer, ex, max_length), {}) for i, ex in enumerate(examples)]
    loader = prepared_loader(accelerator, items, [len(it.encoded) for it in items],
                             sequence_collate(pad_id_of(tokenizer)), batch_size, shuffle=False, seed=0)

    def fn(m: Any, batch: dict) -> dict:
        lp, n = sequence_logprobs(m, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
        return {"confidence": confidence(lp, n)}

    return evaluate(accelerator, model, loader, fn, len(items))["confidence"]
