"""WebRL's losses as pure functions ``(inputs) -> (loss, metrics)``; the loop does backward and logging.

Shapes: B = batch, T = sequence length. Formulas: docs/design.md steps 5 and 6; the actor objective's constants
(beta, beta_high, the p_ref thresholds, kl) are :class:`webrl.method.hyperparams.ActorLoss`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from webrl.method.hyperparams import DEFAULTS, ActorLoss
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


def actor_loss_mask(advantage: torch.Tensor, config: ActorLoss = DEFAULTS.actor) -> torch.Tensor:
    """The steps the actor loss learns from: (B,) -> (B,) bool. ``smooth-l1`` (published code): 1[A > 0];
    ``squared`` (paper eq. 5, an expectation over the buffer): every step, A > 0 and A < 0 alike."""
    if config.objective == "squared":
        return torch.ones_like(advantage, dtype=torch.bool)
    return advantage > 0


def per_token_log_ratio(lp: torch.Tensor, lp_ref: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """r_hat = (lp - lp_ref) / n: each step's log(pi / pi_ref) per action token, over its *own* n (B,).

    The published trainer runs one sequence per batch, so its N is that sequence's action tokens; dividing by the
    tokens of the whole batch instead would shrink r_hat by ~B and the KL term would never reach A (docs/design.md
    step 6)."""
    return (lp - lp_ref) / n_tokens.clamp(min=1)


def _smooth_l1_positive(lp: torch.Tensor, lp_ref: torch.Tensor, n_tokens: torch.Tensor, advantage: torch.Tensor,
                        config: ActorLoss) -> tuple[torch.Tensor, Metrics]:
    """Published trainer (batch 1, as a mean of per-sequence losses): with r_hat = (lp - lp_ref) / n,
        loss = mean_i( SmoothL1(beta_i * r_hat_i, A_i) / beta_i * 1[A_i > 0] ),   beta from :func:`adaptive_beta`.
    The cap beta <= |A / r_hat| is the brake: once beta * r_hat reaches A the step's loss and gradient are 0."""
    mask = actor_loss_mask(advantage, config).to(lp.dtype)  # (B,)
    p_ref = confidence(lp_ref, n_tokens)  # (B,)
    r_hat = per_token_log_ratio(lp, lp_ref, n_tokens)  # (B,)
    beta = adaptive_beta(advantage, p_ref, r_hat, config)  # (B,)
    per_step = F.smooth_l1_loss(beta * r_hat, advantage, reduction="none") / beta * mask  # (B,)
    braked = ((beta * r_hat.detach() >= advantage - 1e-6) & (mask > 0)).float()  # the cap has reached A
    return per_step.mean(), {"beta_mean": float(beta.mean()), "p_ref_mean": float(p_ref.detach().mean()),
                             "beta_r_hat_mean": _masked_mean((beta * r_hat).detach(), mask),
                             "braked_fraction": _masked_mean(braked, mask)}


def _squared(lp: torch.Tensor, lp_ref: torch.Tensor, advantage: torch.Tensor,
             config: ActorLoss) -> tuple[torch.Tensor, Metrics]:
    """The paper's objective (arXiv 2411.02337 eq. 5): the squared error of beta * log(pi(a|s) / pi_ref(a|s))
    against A on every step of the buffer, the action's log-ratio summed over its tokens, beta fixed:
        loss = mean_i( (beta * (lp_i - lp_ref_i) - A_i)^2 ).
    Its minimiser is pi = pi_ref * exp(A / beta) (the KL-regularised optimum): a step with A = -0.6 is pushed down,
    one with A = +1 up, each only as far as beta allows."""
    x = config.beta * (lp - lp_ref)  # (B,)
    per_step = (x - advantage) ** 2
    return per_step.mean(), {"beta_mean": config.beta, "beta_r_hat_mean": float(x.detach().mean())}


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    kept = mask.sum()
    return float((values * mask).sum() / kept) if kept > 0 else 0.0


def actor_loss(lp: torch.Tensor, lp_ref: torch.Tensor, n_tokens: torch.Tensor, advantage: torch.Tensor,
               config: ActorLoss = DEFAULTS.actor) -> tuple[torch.Tensor, Metrics]:
    """WebRL's KL-constrained actor loss (docs/design.md step 6), the mean of per-step losses, so a batch of B gives the
    mean of B batch-1 losses.

    lp, lp_ref: summed action-token log-probs under actor and reference (B,); n_tokens: action tokens (B,);
    advantage: binarised A (B,). ``config.objective`` picks :func:`_smooth_l1_positive` (published trainer) or
    :func:`_squared` (paper). The "w/o KL" ablation (``config.kl`` False): loss = -mean_i(A_i lp_i / n_i * mask_i).
    Metrics: ``log_ratio_k1`` is the mean per-token log(pi / pi_ref) on the trained steps: the k1 estimate of
    KL(pi || pi_ref) on samples the actor did not draw (it may be negative); the exact KL is measured apart
    (``actor_update.exact_kl``).
    """
    mask = actor_loss_mask(advantage, config).to(lp.dtype)  # (B,)
    if not config.kl:
        loss = (-advantage * lp / n_tokens.clamp(min=1) * mask).mean()
        stats: Metrics = {"beta_mean": 0.0}
    elif config.objective == "squared":
        loss, stats = _squared(lp, lp_ref, advantage, config)
    else:
        loss, stats = _smooth_l1_positive(lp, lp_ref, n_tokens, advantage, config)
    log_ratio = per_token_log_ratio(lp, lp_ref, n_tokens).detach()  # (B,)
    return loss, {
        "actor_loss": float(loss.detach()),
        "log_ratio_k1": _masked_mean(log_ratio, mask),
        "mean_advantage": float(advantage.mean()),
        "masked_fraction": float(1.0 - mask.mean()),
        **stats,
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
