"""Log-probabilities of target tokens under a causal LM: the one place the trainer, the replay filter and
the actor's ``/v1/logprobs`` gather them.

For a sequence x and a target mask m, ``token_logprobs`` gives log pi(x_t | x_<t) * m_t and
``sequence_logprobs`` gives lp = sum_t log pi(x_t | x_<t) * m_t with n = sum_t m_t (DESIGN.md step 6:
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


def token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   target_mask: torch.Tensor) -> torch.Tensor:
    """log pi(x_t | x_<t) on target positions, 0 elsewhere: (B, T) float32.

    input_ids, attention_mask, target_mask: (B, T). Position 0 has no context and is never a target.
    Gradients flow when called outside ``torch.no_grad``.
    """
    target = target_mask.bool().clone()  # (B, T)
    target[:, 0] = False
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)  # (B, T)
    if not target.any():
        return out
    width = input_ids.shape[1]
    first = int(target.float().argmax(dim=1)[target.any(dim=1)].min())  # earliest target position
    keep = width - first + 1  # positions first-1 .. T-1 predict tokens first .. T (the last one is unused)
    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
    if _accepts_logits_to_keep(model):
        kwargs["logits_to_keep"] = keep
    logits = model(**kwargs).logits  # (B, keep, V) or (B, T, V)
    logits = logits[:, -keep:-1, :].float()  # (B, T - first, V): predictions for tokens first .. T-1
    ids = input_ids[:, first:]  # (B, T - first)
    picked = torch.gather(logits, -1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    out = out.clone()
    out[:, first:] = picked * target[:, first:].float()
    return out


def sequence_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      target_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(lp (B,), n_tokens (B,)): lp = sum_t log pi(x_t | x_<t) over target tokens, n = their count."""
    per_token = token_logprobs(model, input_ids, attention_mask, target_mask)  # (B, T)
    n_tokens = target_mask.bool().clone()
    n_tokens[:, 0] = False
    return per_token.sum(dim=1), n_tokens.sum(dim=1).to(per_token.dtype)


def confidence(lp: torch.Tensor, n_tokens: torch.Tensor) -> torch.Tensor:
    """1 / perplexity = exp(lp / n): the geometric-mean token probability (B,). n = 0 gives 1.

    The one definition of the replay filter's score (DESIGN.md step 4), of the actor loss's p_ref = exp(lp_ref / n)
    (step 6) and of the actor service's ``/v1/logprobs`` confidence."""
    return torch.exp(lp / n_tokens.clamp(min=1))
