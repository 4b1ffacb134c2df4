"""Scoring many inputs with a model in eval mode, a batch per forward pass."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

T = TypeVar("T")


@torch.no_grad()
def score_in_batches(model: torch.nn.Module, items: Sequence[T], batch_size: int,
                     score: Callable[[Sequence[T]], torch.Tensor]) -> list[float]:
    """``score`` applied to ``items`` ``batch_size`` at a time, in eval mode; the model's mode is restored after."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    was_training = model.training
    model.eval()
    out: list[float] = []
    try:
        for start in range(0, len(items), batch_size):
            out.extend(score(items[start:start + batch_size]).tolist())
    finally:
        model.train(was_training)
    return out
