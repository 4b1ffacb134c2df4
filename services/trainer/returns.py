"""Returns and advantages of WebRL (DESIGN.md step 6), as pure tensor functions.

Every step of a trajectory carries the trajectory's outcome reward r (DESIGN.md step 3), so
G_t = sum_{k=t}^{T-1} gamma^(k-t) r_k is r * (1 - gamma^(T-t)) / (1 - gamma) for a constant r.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from webrl.contracts import GAMMA  # discount of the Monte-Carlo return; the phase job's default

#: Subtracted from every one-step advantage. Published code (``nv - v - 0.05 + reward + mc_return`` in
#: webrl/algorithms/webrl/trainer.py), not in the paper.
STEP_PENALTY = 0.05
#: Bound of the advantage before binarisation (``torch.clamp(advantage, -1, 1)``). Published code.
ADVANTAGE_CLIP = 1.0
#: Binarised advantage of a step with A >= 0. Published code (``torch.where(A >= 0, 1.0, -0.6)``).
POSITIVE_ADVANTAGE = 1.0
#: Binarised advantage of a step with A < 0. Published code, not in the paper.
NEGATIVE_ADVANTAGE = -0.6


def mc_returns(rewards: Sequence[float] | torch.Tensor, gamma: float = GAMMA) -> torch.Tensor:
    """G_t = sum_{k=t}^{T-1} gamma^(k-t) r_k for one trajectory: rewards (T,) -> returns (T,)."""
    r = torch.as_tensor(rewards, dtype=torch.float64)  # (T,)
    out = torch.zeros_like(r)  # (T,)
    running = 0.0
    for t in range(r.shape[0] - 1, -1, -1):
        running = float(r[t]) + gamma * running  # G_t = r_t + gamma * G_{t+1}
        out[t] = running
    return out.to(torch.float32)


def advantages(v_s: torch.Tensor, v_next: torch.Tensor, reward: torch.Tensor, mc_return: torch.Tensor, *,
               step_penalty: float = STEP_PENALTY, clip: float = ADVANTAGE_CLIP) -> torch.Tensor:
    """A = clamp(V(s') - V(s) - step_penalty + r + G_t, -clip, clip). All inputs and the output (B,)."""
    return torch.clamp(v_next - v_s - step_penalty + reward + mc_return, -clip, clip)


def binarise(advantage: torch.Tensor, *, positive: float = POSITIVE_ADVANTAGE,
             negative: float = NEGATIVE_ADVANTAGE) -> torch.Tensor:
    """A_bin = positive if A >= 0 else negative: (B,) -> (B,)."""
    return torch.where(advantage >= 0, torch.full_like(advantage, positive), torch.full_like(advantage, negative))
