"""Log-probabilities of target tokens under a causal LM: the one place the trainer, the replay filter and
the actor's ``/v1/logprobs`` gather them.

For a sequence x and a target mask m, ``token_logprobs`` gives log pi(x_t | x_<t) * m_t and
``sequence_logprobs`` gives lp = sum_t log pi(x_t | x_<t) * m_t with n = sum_t m_t (docs/design.md step 6:
"lp = summed log-probs of the action tokens, end-of-turn token included").

Only the positions that predict a target token go through the LM head (``logits_to_keep``), so a
16k-token prompt does not materialise a 16k x vocabulary logits tensor.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


def _accepts_logits_to_keep(model: Any) -> bool:
    inner = getattr(model, "module", model)  # DDP / DeepSpeed wrap the HF model in .module
    if hasattr(inner, "get_base_model"):  # a peft model passes keyword arguments on to the transformers model
        inner = inner.get_base_model()
    try:
        return "logits_to_keep" in inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return False


def _target_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   target: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(logits (B, T - first, V) float32 predicting tokens first .. T-1, first): one forward that keeps only the
    positions from the earliest target on."""
    width = input_ids.shape[1]
    first = int(target.float().argmax(dim=1)[target.any(dim=1)].min())  # earliest target position
    keep = width - first + 1  # positions first-1 .. T-1 predict tokens first .. T (the last one is unused)
    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
    if _accepts_logits_to_keep(model):
        kwargs["logits_to_keep"] = keep
    logits = model(**kwargs).logits  # (B, keep, V) or (B, T, V)
    return logits[:, -keep:-1, :].float(), first


def _targets(target_mask: torch.Tensor) -> torch.Tensor:
    target = target_mask.bool().clone()  # (B, T)
    target[:, 0] = False  # position 0 has no context
    return target


def target_logits(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  target_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits (B, T', V) float32, targets (B, T') token ids, mask (B, T') bool): the logits that predict each
    position from the batch's earliest target on, the tokens they predict, and which of them are targets. Empty
    (T' = 0) when the batch has no target."""
    target = _targets(target_mask)
    if not target.any():
        empty = input_ids[:, :0]
        return torch.zeros((*empty.shape, 0)), empty, target[:, :0]
    logits, first = _target_logits(model, input_ids, attention_mask, target)
    return logits, input_ids[:, first:], target[:, first:]


def token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   target_mask: torch.Tensor) -> torch.Tensor:
    """log pi(x_t | x_<t) on target positions, 0 elsewhere: (B, T) float32.

    input_ids, attention_mask, target_mask: (B, T). Position 0 has no context and is never a target.
    Gradients flow when called outside ``torch.no_grad``.
    """
    return token_logprobs_and_entropy(model, input_ids, attention_mask, target_mask)[0]


def token_logprobs_and_entropy(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                               target_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi(x_t | x_<t), H_t) on target positions, 0 elsewhere: both (B, T) float32, from one forward.

    H_t = -sum_v pi(v | x_<t) log pi(v | x_<t) = logsumexp(l) - sum_v softmax(l)_v l_v, the policy's entropy at
    each generated token (reported during training; computed without gradient)."""
    target = _targets(target_mask)
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)  # (B, T)
    entropy = torch.zeros_like(out)
    if not target.any():
        return out, entropy
    logits, first = _target_logits(model, input_ids, attention_mask, target)
    ids = input_ids[:, first:]  # (B, T - first)
    log_z = torch.logsumexp(logits, dim=-1)  # (B, T - first)
    picked = torch.gather(logits, -1, ids.unsqueeze(-1)).squeeze(-1) - log_z
    mask = target[:, first:].float()
    out = out.clone()
    out[:, first:] = picked * mask
    with torch.no_grad():
        entropy[:, first:] = (log_z - (logits.softmax(-1) * logits).sum(-1)) * mask
    return out, entropy


def sequence_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      target_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lp (B,), n_tokens (B,)): lp = sum_t log pi(x_t | x_<t) over target tokens, n = their count."""
    per_token = token_logprobs(model, input_ids, attention_mask, target_mask)  # (B, T)
    return per_token.sum(dim=1), _targets(target_mask).sum(dim=1).to(per_token.dtype)


def sequence_logprobs_and_entropy(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                  target_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(lp (B,), n_tokens (B,), mean H_t over every target token of the batch) from one forward."""
    per_token, entropy = token_logprobs_and_entropy(model, input_ids, attention_mask, target_mask)
    n_tokens = _targets(target_mask).sum(dim=1).to(per_token.dtype)
    return per_token.sum(dim=1), n_tokens, float(entropy.sum() / n_tokens.sum().clamp(min=1))


def confidence(lp: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """1 / perplexity = exp(lp / n): the geometric-mean token probability (B,). n = 0 gives 1.

    The one definition of the replay filter's score (docs/design.md step 4), of the actor loss's p_ref = exp(lp_ref / n)
    (step 6) and of the actor service's ``/v1/logprobs`` confidence."""
    return torch.exp(lp / n_tokens.clamp(min=1))
