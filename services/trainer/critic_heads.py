"""The critic on a frozen backbone (``Critic.train_backbone`` False): WebRL's two value heads trained on states
computed once.

Every distinct state of the phase's experience (s_t and s_{t+1} of every step; consecutive steps share one) goes
through the backbone once, with no gradient, in length-sorted batches; its last-token state h (``CriticModel.states``)
is kept. The heads then train on those states with the whole critic's objective (``losses.critic_loss``: both heads'
cross-entropy towards y = 1[G_t > 0] on s and on s'), ``critic.epochs`` passes of ``batching.batch_size`` steps in
a new random order each pass, through the common loop; then they give V(s), V(s') of every step. A pass costs
milliseconds instead of a backbone forward and backward per step. The backbone (a LoRA adapter included) is
published as it was loaded, so the folder loads like any critic's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from services.trainer.data import EpochBatchSampler, StatePairItem
from services.trainer.losses import critic_loss
from services.trainer.training_loop import LoopConfig, StepHook, TrainSummary, prepare, prepared_batches, train
from webrl.models.critic import CriticModel, critic_value, head_pair_logits
from webrl.models.examples import collate_prompts


@dataclass(frozen=True)
class StateRows:
    """The distinct states of a list of steps, and which of them each step's s and s' is."""

    states: list[list[int]]  # (U,) token ids, each distinct sequence once
    state_row: list[int]  # (N,) row of step i's s in ``states``
    next_row: list[int]  # (N,) row of step i's s'


def distinct_states(items: Sequence[StatePairItem]) -> StateRows:
    """Each distinct s / s' of ``items`` once, in order of first appearance."""
    rows: dict[tuple[int, ...], int] = {}
    state_row, next_row = [], []
    for it in items:
        state_row.append(rows.setdefault(tuple(it.state), len(rows)))
        next_row.append(rows.setdefault(tuple(it.next_state), len(rows)))
    return StateRows([list(ids) for ids in rows], state_row, next_row)


@torch.no_grad()
def state_features(critic: CriticModel, states: Sequence[Sequence[int]], pad_id: int, batch_size: int
                   ) -> torch.Tensor:
    """h of every state under the critic's backbone, (U, H) in the heads' dtype on the critic's device; the states
    go through in batches of similar length (little padding), eval mode."""
    was_training = critic.training
    critic.eval()
    order = sorted(range(len(states)), key=lambda i: len(states[i]))
    out: torch.Tensor | None = None
    try:
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            batch = collate_prompts([states[i] for i in rows], pad_id)
            h = critic.states(batch["input_ids"].to(critic.device), batch["attention_mask"].to(critic.device))
            if out is None:
                out = torch.empty((len(states), h.shape[1]), dtype=h.dtype, device=h.device)
            out[torch.tensor(rows, device=h.device)] = h
    finally:
        critic.train(was_training)
    assert out is not None, "no states to encode"
    return out


class CriticHeads(nn.Module):
    """The critic's two heads without the backbone (the same modules, so training these trains the critic's)."""

    def __init__(self, critic: CriticModel) -> None:
        super().__init__()
        self.head1, self.head2 = critic.head1, critic.head2

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """States (B, H) -> logits (2, B, 2) (head, batch, class)."""
        return head_pair_logits(self.head1, self.head2, h)


def shuffled_batches(n: int, batch_size: int) -> Callable[[int], list[list[int]]]:
    """``seed -> batches``: the n steps in a random order cut into batches (batches mix trajectories)."""

    def make(seed: int) -> list[list[int]]:
        order = list(range(n))
        random.Random(seed).shuffle(order)
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]

    return make


def feature_collate(features: torch.Tensor, rows: StateRows) -> Callable[[list[StatePairItem]], dict[str, Any]]:
    """Batches of cached states: ``state_features`` / ``next_features`` (B, H), ``mc_return``, ``index`` (B,)."""

    def fn(items: list[StatePairItem]) -> dict[str, torch.Tensor]:
        s = torch.tensor([rows.state_row[it.index] for it in items], device=features.device)
        n = torch.tensor([rows.next_row[it.index] for it in items], device=features.device)
        return {"state_features": features[s], "next_features": features[n],
                "mc_return": torch.tensor([it.mc_return for it in items], dtype=torch.float32),
                "index": torch.tensor([it.index for it in items], dtype=torch.long)}

    return fn


def heads_loss_fn(heads: Any, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
    """``losses.critic_loss`` on cached states: both heads on s and on s'."""
    return critic_loss(heads(batch["state_features"]), heads(batch["next_features"]), batch["mc_return"])


@dataclass
class TrainedHeads:
    """The heads' training run, V(s) and V(s') of every step, and how long the states took to compute."""

    summary: TrainSummary
    v_s: list[float]
    v_next: list[float]
    states: int
    encode_seconds: float


def train_heads(accelerator: Accelerator, critic: CriticModel, items: Sequence[StatePairItem], pad_id: int,
                config: LoopConfig, on_step: StepHook | None = None) -> TrainedHeads:
    """Train ``critic``'s heads on its frozen backbone's states of ``items`` (module docstring) with ``config``'s
    optimisation settings; ``items[i].index`` must be i (``state_pair_items`` numbers them so)."""
    if any(it.index != i for i, it in enumerate(items)):
        raise ValueError("state pair items must be numbered 0..N-1 in order")
    critic.backbone.requires_grad_(False)
    critic.to(accelerator.device)
    started = time.perf_counter()
    rows = distinct_states(items)
    features = state_features(critic, rows.states, pad_id, config.batch_size)  # (U, H), no gradient
    encode_seconds = time.perf_counter() - started
    summary, v = train_heads_on_states(accelerator, critic, features, rows, items, config, on_step)
    return TrainedHeads(summary, v[rows.state_row].tolist(), v[rows.next_row].tolist(), len(rows.states),
                        encode_seconds)


def train_heads_on_states(accelerator: Accelerator, critic: CriticModel, features: torch.Tensor, rows: StateRows,
                          items: Sequence[StatePairItem], config: LoopConfig,
                          on_step: StepHook | None = None) -> tuple[TrainSummary, torch.Tensor]:
    """The training part of :func:`train_heads` on states already encoded (``features`` (U, H), ``rows``);
    returns the run and V of every state (U,)."""
    prepared = prepare(accelerator, CriticHeads(critic), config)
    sampler = EpochBatchSampler(shuffled_batches(len(items), config.batch_size), config.seed)
    loader = prepared_batches(accelerator, list(items), sampler, feature_collate(features, rows))
    summary = train(accelerator, prepared, loader, heads_loss_fn, config, on_step=on_step)
    with torch.no_grad():  # through the prepared heads: under ZeRO-3 only their forward sees them whole
        v = critic_value(prepared.model(features))  # (U,)
    return summary, v
