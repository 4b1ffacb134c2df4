"""The ORM's judgement: P(YES) from the logits of a causal LM at the prompt's last position.

WebRL's ``add_overall_reward`` (scripts/process_data.py; published code, not in the paper)::

    p = exp(logit_YES) / (exp(logit_YES) + exp(logit_NO))      # softmax over the two answers only
    reward = 1 if p >= 0.5 else 0                               # webrl.method.rewards.reward_of

read at the position after the assistant header. Here prompts are left-padded into batches with explicit
position ids, so a prompt's p does not depend on the batch it is scored in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from webrl.method.hyperparams import DEFAULTS
from webrl.method.rewards import reward_of
from webrl.models.batched import score_in_batches
from webrl.prompts.orm_prompt import NO, YES


def answer_token_id(tokenizer: Any, answer: str) -> int:
    """The token the answer starts with: the vocabulary entry ``answer`` when there is one (Llama-3 has
    ``YES`` and ``NO``, as ``convert_tokens_to_ids`` finds them in WebRL), else the first token of its encoding."""
    vocab = tokenizer.get_vocab()
    if answer in vocab:
        return int(vocab[answer])
    ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError(f"the tokenizer encodes {answer!r} to no tokens")
    return int(ids[0])


def yes_no_token_ids(tokenizer: Any) -> tuple[int, int]:
    """(YES id, NO id); they must differ or p is meaningless."""
    yes, no = answer_token_id(tokenizer, YES), answer_token_id(tokenizer, NO)
    if yes == no:
        raise ValueError(f"YES and NO start with the same token ({yes}); the ORM cannot tell them apart")
    return yes, no


def _left_padded(tokenizer: Any, prompts: Sequence[str], device: torch.device) -> dict[str, torch.Tensor]:
    """Token ids left-padded to the longest prompt, mask, and position ids that ignore the padding."""
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("an ORM prompt encodes to no tokens")
    width = max(len(ids) for ids in encoded)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)  # (B, T)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        mask[row, width - len(ids):] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, T): 0.. from each prompt's first real token
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device), "position_ids": positions.to(device)}


@torch.no_grad()
def yes_no_logits(model: Any, tokenizer: Any, prompts: Sequence[str]) -> torch.Tensor:
    """Logits of (YES, NO) at each prompt's last position, one forward pass: shape (B, 2)."""
    yes, no = yes_no_token_ids(tokenizer)
    device = next(model.parameters()).device
    batch = _left_padded(tokenizer, prompts, device)
    logits = model(**batch, use_cache=False).logits[:, -1, :]  # (B, V): last position is real (left padding)
    return logits[:, [yes, no]].float()  # (B, 2)


def probabilities_from_logits(pair_logits: torch.Tensor) -> torch.Tensor:
    """p = softmax([logit_YES, logit_NO])[YES] for (B, 2) logits: shape (B,)."""
    return torch.softmax(pair_logits.float(), dim=-1)[:, 0]


def orm_probabilities(model: Any, tokenizer: Any, prompts: Sequence[str], batch_size: int = 8) -> list[float]:
    """P(YES) for each rendered ORM prompt, scored ``batch_size`` prompts per forward pass."""
    return score_in_batches(model, prompts, batch_size,
                            lambda batch: probabilities_from_logits(yes_no_logits(model, tokenizer, batch)))


# Measuring the ORM against the rule evaluators (`webrl train-orm`)
def classification_metrics(p: Sequence[float], labels: Sequence[int], threshold: float = DEFAULTS.reward.orm_threshold
                           ) -> dict[str, float]:
    """Accuracy, precision, recall and F1 of ``reward = 1[p >= threshold]`` against 0/1 evaluator labels
    (positive class: success). Precision/recall/F1 are 0 when undefined (no predicted / actual positives)."""
    if len(p) != len(labels):
        raise ValueError(f"{len(p)} probabilities for {len(labels)} labels")
    predicted = [int(reward_of(x, threshold)) for x in p]
    tp = sum(1 for y, z in zip(labels, predicted, strict=True) if y == 1 and z == 1)
    fp = sum(1 for y, z in zip(labels, predicted, strict=True) if y == 0 and z == 1)
    fn = sum(1 for y, z in zip(labels, predicted, strict=True) if y == 1 and z == 0)
    tn = len(labels) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    accuracy = (tp + tn) / len(labels) if labels else 0.0
    return {"n": float(len(labels)), "positives": float(tp + fn), "accuracy": accuracy,
            "precision": precision, "recall": recall, "f1": f1, "tp": float(tp), "fp": float(fp), "fn": float(fn),
            "tn": float(tn), "threshold": threshold}


def roc_auc(p: Sequence[float], labels: Sequence[int]) -> float | None:
    """Area under the ROC curve: P(p of a random success > p of a random failure), ties counting 1/2 (the
    Mann-Whitney U statistic / (n_pos n_neg)); None without both classes. How well p ranks, whatever threshold."""
    positives = [x for x, y in zip(p, labels, strict=True) if y == 1]
    negatives = [x for x, y in zip(p, labels, strict=True) if y == 0]
    if not positives or not negatives:
        return None
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in positives for b in negatives)
    return wins / (len(positives) * len(negatives))


def calibration_bins(p: Sequence[float], labels: Sequence[int], n_bins: int = 10) -> list[dict[str, float]]:
    """Equal-width bins of p: count, mean p and observed success rate per non-empty bin."""
    bins: list[list[tuple[float, int]]] = [[] for _ in range(n_bins)]
    for x, y in zip(p, labels, strict=True):
        bins[min(n_bins - 1, int(x * n_bins))].append((x, y))
    return [{"lo": i / n_bins, "hi": (i + 1) / n_bins, "n": float(len(b)),
             "mean_p": sum(x for x, _ in b) / len(b), "success_rate": sum(y for _, y in b) / len(b)}
            for i, b in enumerate(bins) if b]


def expected_calibration_error(p: Sequence[float], labels: Sequence[int], n_bins: int = 10) -> float:
    """ECE = sum_b (n_b / n) |mean_p_b - success_rate_b| (Guo et al. 2017)."""
    total = len(p)
    return sum(b["n"] / total * abs(b["mean_p"] - b["success_rate"]) for b in calibration_bins(p, labels, n_bins)
               ) if total else 0.0


def plot_calibration(curves: dict[str, tuple[Sequence[float], Sequence[int]]], path: Any, n_bins: int = 10) -> Any:
    """Reliability diagram (PNG): observed success rate against mean p per bin, one curve per ORM."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5), dpi=100)
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfectly calibrated")
    for name, (p, labels) in curves.items():
        bins = calibration_bins(p, labels, n_bins)
        ece = expected_calibration_error(p, labels, n_bins)
        ax.plot([b["mean_p"] for b in bins], [b["success_rate"] for b in bins], marker="o",
                label=f"{name} (ECE {ece:.3f}, n={len(p)})")
    ax.set_xlabel("ORM P(YES)")
    ax.set_ylabel("success rate under the rule evaluators")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("ORM calibration on held-out trajectories")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
