"""Training data from the database: a phase's trajectories and ORM labels -> typed step examples, encoded
sequences and length-bucketed padded batches.

A step example holds the actor's state s_t (the actor prompt at step t), the next state s_{t+1}, the action
the actor generated (token ids as generated), the step reward r (the trajectory's outcome reward on every
step, docs/design.md step 3), ``done`` (last step only) and the Monte-Carlo return G_t.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.agent.environment import INFRASTRUCTURE_STOPS
from webrl.agent.schemas import Step, Trajectory
from webrl.db import models as m
from webrl.db.repository import label_of, load_trajectory, trajectories_for_phase
from webrl.method.hyperparams import DEFAULTS
from webrl.method.returns import mc_returns
from webrl.method.rewards import is_success
from webrl.models.examples import (
    EncodedExample,
    collate,
    collate_prompts,
    encode_example,
    encode_example_ids,
    encode_prompt,
)
from webrl.wire.contracts import DEMONSTRATION_PURPOSE

log = logging.getLogger("webrl.trainer.data")

#: (intent, earlier steps, current simplified HTML) -> the actor prompt text.
PromptFn = Callable[[str, Sequence[Step], str], str]


@dataclass(frozen=True)
class StepExample:
    """One step of one trajectory, ready for the critic and the actor."""

    trajectory_id: int
    task_key: str
    phase: int
    index: int
    prompt: str  # s_t
    next_prompt: str  # s_{t+1}; the last step's s' shows the page after its action (or s_t if unknown)
    completion: str  # the raw response
    completion_ids: tuple[int, ...]  # as generated; empty when the step has no stored ids
    reward: float  # r: the trajectory's outcome reward
    done: bool
    mc_return: float  # G_t with gamma


def actor_prompt_fn(tokenizer: Any, max_tokens: int | None = None) -> PromptFn:
    """The actor's own prompt (``webrl.prompts.actor.render_actor_prompt``) for ``tokenizer``."""
    from webrl.prompts.actor import render_actor_prompt

    def prompt(intent: str, history: Sequence[Step], html: str) -> str:
        return render_actor_prompt(tokenizer, intent, list(history), html, max_tokens=max_tokens)

    return prompt


def trajectory_examples(traj: Trajectory, trajectory_id: int, phase: int, reward: float, prompt: PromptFn,
                        gamma: float = DEFAULTS.advantage.gamma) -> list[StepExample]:
    """Every step of ``traj`` as a :class:`StepExample` whose reward is ``reward``."""
    steps = traj.steps
    if not steps:
        return []
    returns = mc_returns([reward] * len(steps), gamma)  # (T,)
    states = [prompt(traj.intent, steps[:t], steps[t].observation.html) for t in range(len(steps))]
    final = traj.last_observation
    last_next = prompt(traj.intent, steps, final.html) if final is not None else states[-1]
    out = []
    for t, step in enumerate(steps):
        out.append(StepExample(
            trajectory_id=trajectory_id, task_key=traj.task_id, phase=phase, index=step.index,
            prompt=states[t], next_prompt=states[t + 1] if t + 1 < len(steps) else last_next,
            completion=step.response, completion_ids=tuple(step.token_ids), reward=float(reward),
            done=t == len(steps) - 1, mc_return=float(returns[t]),
        ))
    return out


def _labelled_reward(row: m.TrajectoryRow, orm_version: str | None = None) -> float | None:
    """The reward of the trajectory's label by the ORM ``orm_version`` (the run's; None: its latest label, any ORM's)
    (:func:`webrl.db.repository.label_of`), None when it has none."""
    label = label_of(row, orm_version)
    return None if label is None else float(label.reward)


def load_phase_examples(session: Session, phase: int, prompt: PromptFn, *, run_id: int,
                        gamma: float = DEFAULTS.advantage.gamma, purpose: str = "train",
                        orm_version: str | None = None) -> list[StepExample]:
    """All steps of the phase's labelled trajectories in run ``run_id`` (unlabelled ones are skipped and counted in
    the log), less those the machinery ended (:data:`~webrl.agent.environment.INFRASTRUCTURE_STOPS`: a crashed
    browser, a site down), which are not the actor's behaviour."""
    out: list[StepExample] = []
    skipped = 0
    for row in trajectories_for_phase(session, phase, purpose, run_id=run_id):
        if row.stop_reason in INFRASTRUCTURE_STOPS:
            log.warning("phase %d: trajectory %d ended by %s is not the actor's experience; left out", phase, row.id,
                        row.stop_reason)
            continue
        reward = _labelled_reward(row, orm_version)
        if reward is None:
            skipped += 1
            continue
        out.extend(trajectory_examples(load_trajectory(row), row.id, phase, reward, prompt, gamma))
    if skipped:
        log.warning("phase %d: %d trajectories have no ORM label and were skipped", phase, skipped)
    return out


def first_success_examples(session: Session, before_phase: int, prompt: PromptFn, *, run_id: int,
                           gamma: float = DEFAULTS.advantage.gamma, purpose: str = "train",
                           orm_version: str | None = None) -> list[StepExample]:
    """Replay candidates: from phases < ``before_phase`` of run ``run_id`` (another run's successes are not this
    actor's experience), the first successful trajectory of each task (earliest phase, then earliest id), all its
    steps (docs/design.md step 4)."""
    rows = session.scalars(
        select(m.TrajectoryRow)
        .where(m.TrajectoryRow.phase < before_phase, m.TrajectoryRow.purpose == purpose,
               m.TrajectoryRow.run_id == run_id)
        .order_by(m.TrajectoryRow.phase, m.TrajectoryRow.id)
    ).all()
    seen: set[int] = set()
    out: list[StepExample] = []
    for row in rows:
        reward = _labelled_reward(row, orm_version)
        if reward is None or not is_success(reward) or row.task_id in seen:
            continue
        seen.add(row.task_id)
        out.extend(trajectory_examples(load_trajectory(row), row.id, row.phase, reward, prompt, gamma))
    return out


def demonstration_examples(session: Session, prompt: PromptFn, *, run_id: int,
                           gamma: float = DEFAULTS.advantage.gamma) -> list[StepExample]:
    """Every step of run ``run_id``'s successful demonstrations (purpose "sft", judged by the rule evaluators:
    an oracle's demonstration has no ORM label), the anchor ``replay.demo_ratio`` samples from."""
    rows = session.scalars(
        select(m.TrajectoryRow).where(m.TrajectoryRow.purpose == DEMONSTRATION_PURPOSE,
                                      m.TrajectoryRow.run_id == run_id)
        .order_by(m.TrajectoryRow.id)
    ).all()
    out: list[StepExample] = []
    for row in rows:
        if row.env_score is not None and is_success(row.env_score):
            out.extend(trajectory_examples(load_trajectory(row), row.id, row.phase, float(row.env_score), prompt,
                                           gamma))
    return out


def encode_action(tokenizer: Any, example: StepExample, max_length: int | None = None) -> EncodedExample:
    """s_t + action: the stored token ids when there are any, else the response text (+ end-of-turn)."""
    if example.completion_ids:
        return encode_example_ids(tokenizer, example.prompt, example.completion_ids, max_length=max_length)
    return encode_example(tokenizer, example.prompt, example.completion, max_length=max_length)


# ----------------------------------------------------------------------------------------------- batching

def bucket_batches(lengths: Sequence[int], batch_size: int, *, shuffle: bool = True, seed: int = 0) -> list[list[int]]:
    """Indices grouped into batches of similar length: sort by length, cut into ``batch_size`` chunks, then
    shuffle the order of the chunks (not their content) so training still sees lengths in random order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle:
        random.Random(seed).shuffle(batches)
    return batches


class EpochBatchSampler:
    """A ``batch_sampler`` whose batches ``make(seed + epoch)`` draws again each epoch."""

    def __init__(self, make: Callable[[int], list[list[int]]], seed: int = 0) -> None:
        self.make = make
        self.seed = seed
        self.epoch = 0

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.make(self.seed + self.epoch)
        self.epoch += 1
        yield from batches

    def __len__(self) -> int:
        return len(self.make(self.seed))


def bucket_sampler(lengths: Sequence[int], batch_size: int, *, shuffle: bool = True, seed: int = 0
                   ) -> EpochBatchSampler:
    """Length buckets (:func:`bucket_batches`), in a new order each epoch."""
    lengths = list(lengths)
    return EpochBatchSampler(lambda s: bucket_batches(lengths, batch_size, shuffle=shuffle, seed=s), seed)


@dataclass(frozen=True)
class SequenceItem:
    """A dataset row: an encoded sequence plus per-example scalars the loss needs (advantage, lp_ref...)."""

    index: int
    encoded: EncodedExample
    scalars: dict[str, float]


def sequence_collate(pad_id: int) -> Callable[[list[SequenceItem]], dict[str, torch.Tensor]]:
    """Collate :class:`SequenceItem`s: padded ``input_ids``/``attention_mask``/``target_mask`` (B, T), ``index``
    (B,) and one (B,) float tensor per scalar name."""

    def fn(items: list[SequenceItem]) -> dict[str, torch.Tensor]:
        batch = collate([it.encoded for it in items], pad_id)
        batch["index"] = torch.tensor([it.index for it in items], dtype=torch.long)  # (B,)
        for name in items[0].scalars:
            batch[name] = torch.tensor([it.scalars[name] for it in items], dtype=torch.float32)  # (B,)
        return batch

    return fn


@dataclass(frozen=True)
class StatePairItem:
    """A critic row: s_t and s_{t+1} as prompt ids, and G_t; ``trajectory_id`` and ``step`` place it in its
    trajectory (consecutive rows share a state: s_{t+1} of one is s_t of the next)."""

    index: int
    state: list[int]
    next_state: list[int]
    mc_return: float
    trajectory_id: int = 0
    step: int = 0


def state_pair_collate(pad_id: int) -> Callable[[list[StatePairItem]], dict[str, torch.Tensor]]:
    """Collate :class:`StatePairItem`s, each distinct state once: ``states_input_ids`` / ``states_attention_mask``
    (U, T) hold the U distinct sequences among the batch's s and s'; ``state_row`` / ``next_row`` (B,) say which
    row is each item's s and s'; ``mc_return``, ``index`` (B,).

    Consecutive steps of a trajectory share a state (s_{t+1} of step t is s_t of step t+1), so a window of k
    consecutive steps forwards k + 1 states instead of 2k (:func:`trajectory_windows` builds such batches)."""

    def fn(items: list[StatePairItem]) -> dict[str, torch.Tensor]:
        rows: dict[tuple[int, ...], int] = {}
        for it in items:
            rows.setdefault(tuple(it.state), len(rows))
            rows.setdefault(tuple(it.next_state), len(rows))
        states = collate_prompts(list(rows), pad_id)
        return {"states_input_ids": states["input_ids"], "states_attention_mask": states["attention_mask"],
                "state_row": torch.tensor([rows[tuple(it.state)] for it in items], dtype=torch.long),
                "next_row": torch.tensor([rows[tuple(it.next_state)] for it in items], dtype=torch.long),
                "mc_return": torch.tensor([it.mc_return for it in items], dtype=torch.float32),
                "index": torch.tensor([it.index for it in items], dtype=torch.long)}

    return fn


def state_pair_items(tokenizer: Any, examples: Sequence[StepExample], max_length: int | None) -> list[StatePairItem]:
    """One :class:`StatePairItem` per example, in order; each distinct prompt is tokenised once."""
    cache: dict[str, list[int]] = {}

    def ids(prompt: str) -> list[int]:
        if prompt not in cache:
            cache[prompt] = encode_prompt(tokenizer, prompt, max_length=max_length)
        return cache[prompt]

    return [StatePairItem(i, ids(ex.prompt), ids(ex.next_prompt), ex.mc_return, ex.trajectory_id, ex.index)
            for i, ex in enumerate(examples)]


#: Consecutive steps of one trajectory kept together in a training batch: 2 share one state (3 forwards, not 4)
#: while a batch of 4 still mixes two trajectories. A batch of one trajectory's steps holds one label
#: (y = 1[G_t > 0] is the same on every step of a trajectory), and such batches made the demo's critic loss
#: swing between 0 and 140 from one step to the next.
TRAIN_WINDOW = 2


def trajectory_windows(items: Sequence[StatePairItem], batch_size: int, *, window: int = TRAIN_WINDOW,
                       shuffle: bool = True, seed: int = 0) -> list[list[int]]:
    """Batches of ``batch_size`` items (the last may be smaller) made of windows of up to ``window`` consecutive
    steps of one trajectory, so that :func:`state_pair_collate` forwards a state two steps share once.

    Each trajectory's steps are sorted by step and cut into windows; ``shuffle`` puts the windows in random order
    (batches mix trajectories); without it every trajectory's steps stay in order and together (evaluation:
    the most sharing)."""
    if batch_size < 1 or window < 1:
        raise ValueError(f"batch_size and window must be >= 1, got {batch_size} and {window}")
    by_trajectory: dict[int, list[int]] = {}
    for position, it in enumerate(items):
        by_trajectory.setdefault(it.trajectory_id, []).append(position)
    windows: list[list[int]] = []
    for positions in by_trajectory.values():
        positions.sort(key=lambda p: items[p].step)
        windows.extend(positions[i:i + window] for i in range(0, len(positions), window))
    if shuffle:
        random.Random(seed).shuffle(windows)
    order = [p for w in windows for p in w]
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def window_sampler(items: Sequence[StatePairItem], batch_size: int, *, shuffle: bool = True, seed: int = 0
                   ) -> EpochBatchSampler:
    """Batches of windows of consecutive steps (:func:`trajectory_windows`), in a new order each epoch."""
    items = list(items)
    return EpochBatchSampler(lambda s: trajectory_windows(items, batch_size, shuffle=shuffle, seed=s), seed)
