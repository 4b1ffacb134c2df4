"""Returns and advantages of WebRL (docs/design.md step 6), as pure tensor functions (the trainer trains with them,
the viewer shows them).

Every step of a trajectory carries the trajectory's outcome reward r (docs/design.md step 3), so
G_t = sum_{k=t}^{T-1} gamma^(k-t) r_k is r * (1 - gamma^(T-t)) / (1 - gamma) for a constant r.
The constants (gamma, step penalty, clip, the binarised values) are :class:`webrl.method.hyperparams.Advantage`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from webrl.method.hyperparams import DEFAULTS, Advantage


def mc_returns(rewards: Sequence[float] | torch.Tensor, gamma: float = DEFAULTS.advantage.gamma) -> torch.Tensor:
    """G_t = sum_{k=t}^{T-1} gamma^(k-t) r_k for one trajectory: rewards (T,) -> returns (T,)."""
    r = torch.as_tensor(rewards, dtype=torch.float64)  # (T,)
    out = torch.zeros_like(r)  # (T,)
    running = 0.0
    for t in range(r.shape[0] - 1, -1, -1):
        running = float(r[t]) + gamma * running  # G_t = r_t + gamma * G_{t+1}
        out[t] = running
    return out.to(torch.float32)


def advantages(v_s: torch.Tensor, v_next: torch.Tensor, reward: torch.Tensor, mc_return: torch.Tensor,
               config: Advantage = DEFAULTS.advantage) -> torch.Tensor:
    """A = clamp(V(s') - V(s) - step_penalty + r + G_t, -clip, clip). All inputs and the output (B,)."""
    return torch.clamp(v_next - v_s - config.step_penalty + reward + mc_return, -config.clip, config.clip)


def binarise(advantage: torch.Tensor, config: Advantage = DEFAULTS.advantage) -> torch.Tensor:
    """A_bin = positive if A >= 0 else negative: (B,) -> (B,)."""
    return torch.where(advantage >= 0, torch.full_like(advantage, config.positive),
                       torch.full_like(advantage, config.negative))
