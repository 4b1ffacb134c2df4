"""WebRL's losses as pure functions ``(inputs) -> (loss, metrics)``; the loop does backward and logging.

Shapes: B = batch, T = sequence length. Formulas: DESIGN.md steps 5 and 6; the actor objective's constants
(beta, beta_high, the p_ref thresholds, kl) are :class:`webrl.hyperparams.ActorLoss`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from webrl.hyperparams import DEFAULTS, ActorLoss
from webrl.models.critic import critic_value
from webrl.models.logprobs import confidence

Metrics = dict[str, float]


def critic_loss(logits_s: torch.Tensor, logits_next: torch.Tensor,
                mc_return: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """L_critic = sum_{k=1,2} CE(head_k(s), y) + CE(head_k(s'), y),  y = 1[G_t > 0].

    logits_s, logits_next: both heads' logits (2, B, 2) (``CriticModel.head_logits``); mc_return: (B,).
    Each CE is a batch mean; the four are summed (published code: ``v1_loss + v2_loss + nv1_loss + nv2_loss``).
    """
    y = (mc_return > 0).long()  # (B,)
    ce_s = [F.cross_entropy(logits_s[k].float(), y) for k in range(2)]
    ce_next = [F.cross_entropy(logits_next[k].float(), y) for k in range(2)]
    loss = ce_s[0] + ce_s[1] + ce_next[0] + ce_next[1]
    v = critic_value(logits_s.detach())  # (B,)
    accuracy = ((v >= 0.5).long() == y).float().mean()
    return loss, {"critic_loss": float(loss.detach()), "critic_ce_s": float((ce_s[0] + ce_s[1]).detach()) / 2,
                  "critic_ce_next": float((ce_next[0] + ce_next[1]).detach()) / 2,
                  "critic_accuracy": float(accuracy), "value_mean": float(v.mean())}


def adaptive_beta(advantage: torch.Tensor, p_ref: torch.Tensor, r_hat: torch.Tensor,
                  config: ActorLoss = DEFAULTS.actor) -> torch.Tensor:
    """beta = beta_high if (A > 0 and p_ref >= p+) or (A < 0 and p_ref < p-) else beta; then
    beta = min(beta, |A / r_hat|), detached. All (B,). r_hat = 0 leaves beta unchanged (|A / 0| = inf)."""
    high = ((advantage > 0) & (p_ref >= config.p_ref_positive)) | ((advantage < 0) & (p_ref < config.p_ref_negative))
    beta = torch.where(high, torch.full_like(advantage, config.beta_high), torch.full_like(advantage, config.beta))
    ratio = torch.abs(advantage / r_hat.detach())  # inf where r_hat == 0
    return torch.minimum(beta, ratio).detach()


def actor_loss_mask(advantage: torch.Tensor) -> torch.Tensor:
    """The steps the actor loss learns from, 1[A > 0] (paper eq. 5; published code): (B,) -> (B,) bool."""
    return advantage > 0


def actor_loss(lp: torch.Tensor, lp_ref: torch.Tensor, n_tokens: torch.Tensor, advantage: torch.Tensor,
               config: ActorLoss = DEFAULTS.actor) -> tuple[torch.Tensor, Metrics]:
    """WebRL's KL-constrained actor loss (DESIGN.md step 6).

    lp, lp_ref: summed action-token log-probs under actor and reference (B,); n_tokens: action tokens (B,);
    advantage: binarised A (B,). With mask = 1[A > 0] and N = sum(n_tokens * mask) (1 if no step is kept):
        r_hat = (lp - lp_ref) / N,   p_ref = exp(lp_ref / n_tokens),
        loss  = mean( SmoothL1(beta * r_hat, A) / beta * mask ),   beta from :func:`adaptive_beta`.
    The "w/o KL" ablation (``config.kl`` False): loss = -mean(A * lp / N * mask).
    """
    mask = actor_loss_mask(advantage).to(lp.dtype)  # (B,)
    n_masked = (n_tokens * mask).sum()
    big_n = torch.where(n_masked > 0, n_masked, torch.ones_like(n_masked))  # N
    p_ref = confidence(lp_ref, n_tokens)  # (B,)
    r_hat = (lp - lp_ref) / big_n  # (B,)
    if config.kl:
        beta = adaptive_beta(advantage, p_ref, r_hat, config)  # (B,)
        per_step = F.smooth_l1_loss(beta * r_hat, advantage, reduction="none") / beta * mask  # (B,)
    else:
        beta = torch.zeros_like(advantage)
        per_step = -advantage * lp / big_n * mask
    loss = per_step.mean()
    log_ratio = ((lp - lp_ref) / n_tokens.clamp(min=1)).detach()  # per-token log(pi / pi_ref) (B,)
    return loss, {
        "actor_loss": float(loss.detach()),
        "kl": float(log_ratio.mean()),
        "mean_advantage": float(advantage.mean()),
        "masked_fraction": float(1.0 - mask.mean()),
        "beta_mean": float(beta.mean()),
        "p_ref_mean": float(p_ref.detach().mean()),
        "r_hat_mean": float(r_hat.detach().mean()),
    }


def sft_loss(token_logp: torch.Tensor, target_mask: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
    """L_SFT = -sum_t log pi(x_t | x_<t) m_t / sum_t m_t over the batch's target (action) tokens.

    token_logp: (B, T) from :func:`webrl.models.logprobs.token_logprobs` (0 off target); target_mask (B, T).
    """
    mask = target_mask.bool().clone()
    mask[:, 0] = False
    n = mask.sum().clamp(min=1)
    loss = -(token_logp * mask).sum() / n
    return loss, {"sft_loss": float(loss.detach()), "target_tokens": float(n)}
