"""The replay buffer with actor-confidence filtering (docs/design.md step 4; paper §3.3, "experience replay
buffer with actor confidence filtering").

From earlier phases, the first successful trajectory per task (``data.first_success_examples``); keep a
step when the current actor's confidence in its action, c = 1/perplexity = exp(lp / n), lies in
(low, high]; keep at most cap_ratio x the current phase's step count; mix with the current steps; shuffle.
The three numbers are :class:`webrl.method.hyperparams.Replay`.

The anchor (this project's, off by default): with ``replay.demo_tasks``, the run's oracle demonstrations
(``data.demonstration_examples``) join the actor's update at ``demo_ratio`` steps per step with A > 0
(:func:`select_demonstrations`), with A = +1.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from services.trainer.data import SequenceItem, StepExample, encode_action, sequence_collate
from services.trainer.training_loop import evaluate, prepared_loader
from webrl.method.hyperparams import DEFAULTS, Replay
from webrl.models.examples import pad_id_of
from webrl.models.logprobs import confidence, sequence_logprobs


def in_confidence_band(scores: Sequence[float], low: float, high: float) -> list[bool]:
    """keep_i = low < c_i <= high (the replay filter's band; the actor's positives use it too)."""
    return [low < c <= high for c in scores]


def keep_confident(scores: Sequence[float], replay: Replay = DEFAULTS.replay) -> list[bool]:
    """keep_i = confidence_low < c_i <= confidence_high: neither too unfamiliar to learn from safely nor
    already known."""
    return in_confidence_band(scores, replay.confidence_low, replay.confidence_high)


def select_replay(candidates: Sequence[StepExample], scores: Sequence[float], n_current: int, *, seed: int = 0,
                  replay: Replay = DEFAULTS.replay) -> list[StepExample]:
    """Shuffle the candidates, keep the confident ones (:func:`keep_confident`), cap at
    ``replay.cap_ratio * n_current`` (the published order: shuffle, filter, take the first min(kept, cap))."""
    if len(candidates) != len(scores):
        raise ValueError(f"{len(candidates)} candidates but {len(scores)} scores")
    keep = keep_confident(scores, replay)
    order = list(range(len(candidates)))
    random.Random(seed).shuffle(order)
    kept = [candidates[i] for i in order if keep[i]]
    return kept[: replay.cap_ratio * n_current]


def select_demonstrations(demonstrations: Sequence[StepExample], n_positive: int, *, seed: int = 0,
                          replay: Replay = DEFAULTS.replay) -> list[StepExample]:
    """The anchor: floor(``replay.demo_ratio`` * n_positive) demonstration steps, a seeded sample (all when there
    are fewer). Empty when no step has A > 0: the actor is then not updated at all."""
    n = min(len(demonstrations), int(replay.demo_ratio * n_positive))
    return random.Random(seed + 2).sample(list(demonstrations), n)


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
