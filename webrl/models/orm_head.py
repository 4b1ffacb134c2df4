"""An ORM that reads its verdict from a classification head on the backbone, not from the YES/NO token logits.

WebRL's ORM is generative: P(YES) = softmax(logit_YES, logit_NO)[YES] at the answer position
(:mod:`webrl.models.orm`). A 135M model trained that way on a few hundred trajectories learned the base rate
(held-out accuracy 0.64, AUC 0.68; docs/measurements.md), so the small-model ORM reads the same prompt the way
the critic reads a state (:mod:`webrl.models.critic`):

- h = the backbone's hidden state at the prompt's last token (the assistant header, where the answer would be
  generated)                                                                     # (B, H)
- z = (h - mu) / sigma, mu and sigma the training features' mean and std         # (H,) each
- P(success) = softmax(W z + b)[1], W: (2, H)                                    # logistic regression
- trained with class-balanced cross-entropy + lambda ||W||^2 on frozen features; lambda is chosen on a
  held-out part of the training tasks (never the test split) and the head is refitted on all of them.

The result plugs in where the generative ORM does: ``p`` feeds the same rule, reward = 1[p >= threshold]
(:func:`webrl.method.rewards.reward_of`). An ORM folder holds the backbone (an adapter on a registered base, or a full
model), :data:`HEAD_FILE` and :data:`HEAD_CONFIG_FILE`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from webrl.config import Settings
from webrl.models.critic import encode_states, last_token_states
from webrl.models.loading import use_configured_threads

HEAD_FILE = "orm_head.safetensors"
HEAD_CONFIG_FILE = "orm_head.json"
HEAD_KIND = "webrl-orm-classifier"
N_CLASSES = 2

#: L2 strengths tried on the held-out part of the training tasks (features are standardised, so one grid fits
#: any backbone width).
L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
#: Share of the training tasks held out to choose lambda.
VALIDATION_SHARE = 0.25
#: Full-batch L-BFGS iterations per fit (a convex problem in 2H + 2 parameters: converges well within this).
LBFGS_STEPS = 200


def is_orm_classifier(path: str | Path) -> bool:
    """True when ``path`` is an ORM folder with a classification head."""
    return (Path(path) / HEAD_FILE).is_file() and (Path(path) / HEAD_CONFIG_FILE).is_file()


class OrmHead(nn.Module):
    """z = (h - mu) / sigma; logits = W z + b (2 classes, index 1 = success)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.register_buffer("mu", torch.zeros(hidden))
        self.register_buffer("sigma", torch.ones(hidden))
        self.linear = nn.Linear(hidden, N_CLASSES)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.linear((h.float() - self.mu) / self.sigma)  # (B, 2)


def success_probability(logits: torch.Tensor) -> torch.Tensor:
    """P(success) = softmax(logits)[1]: (B, 2) -> (B,)."""
    return logits.float().softmax(-1)[:, 1]


@dataclass(frozen=True)
class HeadFit:
    """A fitted head and how lambda was chosen."""

    head: OrmHead
    l2: float
    validation: dict[float, float]  # lambda -> balanced accuracy on the held-out training tasks
    n_train: int
    n_validation: int


def balanced_class_weights(labels: torch.Tensor) -> torch.Tensor:
    """Per-class weights n / (2 n_c), so each class counts as much in the loss whatever the base rate."""
    counts = torch.bincount(labels, minlength=N_CLASSES).float().clamp(min=1)
    return labels.numel() / (N_CLASSES * counts)


def fit_head(features: torch.Tensor, labels: torch.Tensor, l2: float) -> OrmHead:
    """L = sum_i w_{y_i} CE(W z_i + b, y_i) / sum_i w_{y_i} + l2 ||W||^2, minimised by full-batch L-BFGS.

    ``features`` (N, H) frozen backbone states, ``labels`` (N,) 0/1."""
    features = features.float()
    head = OrmHead(features.shape[1])
    head.mu.copy_(features.mean(0))
    head.sigma.copy_(features.std(0).clamp(min=1e-6))
    nn.init.zeros_(head.linear.weight)
    nn.init.zeros_(head.linear.bias)
    loss_fn = nn.CrossEntropyLoss(weight=balanced_class_weights(labels))
    optimizer = torch.optim.LBFGS(head.linear.parameters(), lr=1.0, max_iter=LBFGS_STEPS,
                                  line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn(head(features), labels) + l2 * head.linear.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return head.eval().requires_grad_(False)


def balanced_accuracy(p: torch.Tensor, labels: torch.Tensor, threshold: float = 0.5) -> float:
    """Mean of the recall on successes and on failures (0.5 for a constant answer)."""
    predicted = (p >= threshold).long()
    recalls = [float((predicted[labels == c] == c).float().mean()) for c in range(N_CLASSES) if (labels == c).any()]
    return sum(recalls) / len(recalls)


def held_out_tasks(groups: Sequence[str], seed: int) -> torch.Tensor:
    """(N,) bool: the rows of a seeded :data:`VALIDATION_SHARE` of the ``groups`` (task keys: the trajectories
    of one task stay on one side); none when there is a single task."""
    names = sorted(set(groups))
    if len(names) < 2:
        return torch.zeros(len(groups), dtype=torch.bool)
    held = set(random.Random(seed).sample(names, max(1, round(len(names) * VALIDATION_SHARE))))
    return torch.tensor([g in held for g in groups], dtype=torch.bool)


def balanced_log_loss(p: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean over the classes of -log P(the true class): the smooth measure that breaks ties of
    :func:`balanced_accuracy` (lower is better)."""
    p = p.float().clamp(1e-7, 1 - 1e-7)
    losses = [float(-(p[labels == 1]).log().mean()), float(-(1 - p[labels == 0]).log().mean())]
    return sum(v for v in losses if v == v) / sum(1 for v in losses if v == v)  # a class absent gives nan


def choose_and_fit(features: torch.Tensor, labels: torch.Tensor, groups: Sequence[str], seed: int) -> HeadFit:
    """Pick lambda from :data:`L2_GRID` by balanced accuracy on a held-out :data:`VALIDATION_SHARE` of the
    ``groups`` (task keys: the trajectories of one task stay on one side), then refit on everything."""
    val = held_out_tasks(groups, seed)
    held = bool(val.any())
    scores: dict[float, float] = {}
    if held and len(set(labels[~val].tolist())) == N_CLASSES and len(set(labels[val].tolist())) == N_CLASSES:
        for l2 in L2_GRID:
            head = fit_head(features[~val], labels[~val], l2)
            with torch.no_grad():
                scores[l2] = balanced_accuracy(success_probability(head(features[val])), labels[val])
    best = max(scores, key=lambda k: (scores[k], k)) if scores else L2_GRID[len(L2_GRID) // 2]
    return HeadFit(head=fit_head(features, labels, best), l2=best, validation=scores,
                   n_train=int((~val).sum()), n_validation=int(val.sum()))


# The backbone
def load_backbone(path: str | Path, settings: Settings) -> Any:
    """The base model (no LM head) of an ORM folder or start, eval mode, fp32: an adapter merged into its cached
    base, or a full folder. Both are read as the causal LM they were saved as (an ORM start's adapter is a
    causal-LM adapter), then stripped of the LM head."""
    from transformers import AutoModelForCausalLM

    from webrl.models.adapters import is_adapter, load_merged

    if is_adapter(path):
        model = load_merged(path, settings, torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=torch.float32)
    return model.base_model.eval()


@torch.no_grad()
def prompt_features(backbone: Any, tokenizer: Any, prompts: Sequence[str], batch_size: int = 4,
                    progress: Callable[[int], None] | None = None) -> torch.Tensor:
    """h at each prompt's last token: (N, H) float32, ``batch_size`` prompts per forward pass (right-padded:
    the last real token is read, so a prompt's features do not depend on its batch); ``progress`` hears how
    many prompts each pass finished."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    device = next(backbone.parameters()).device
    rows = [torch.zeros(0, int(backbone.config.hidden_size))]
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start:start + batch_size]
        input_ids, mask = encode_states(tokenizer, batch, device)
        out = backbone(input_ids=input_ids, attention_mask=mask, use_cache=False)
        rows.append(last_token_states(out.last_hidden_state, mask).float().cpu())
        if progress is not None:
            progress(len(batch))
    return torch.cat(rows)


class OrmClassifier:
    """Backbone + :class:`OrmHead`: P(success) of rendered ORM prompts."""

    def __init__(self, backbone: Any, head: OrmHead) -> None:
        self.backbone = backbone
        self.head = head

    @classmethod
    def from_pretrained(cls, path: str | Path, settings: Settings) -> OrmClassifier:
        path = Path(path)
        if not is_orm_classifier(path):
            raise FileNotFoundError(f"{path} is not an ORM classifier: {HEAD_FILE} or {HEAD_CONFIG_FILE} is missing")
        config = json.loads((path / HEAD_CONFIG_FILE).read_text())
        if config.get("kind") != HEAD_KIND:
            raise ValueError(f"{path / HEAD_CONFIG_FILE} is not a {HEAD_KIND} ({config.get('kind')!r})")
        head = OrmHead(int(config["hidden_size"]))
        head.load_state_dict(load_file(str(path / HEAD_FILE)))
        use_configured_threads(settings)  # as load_causal_lm does for the generative ORM
        backbone = load_backbone(path, settings).to(settings.models.device)  # the head reads features on the CPU
        return cls(backbone, head.eval().requires_grad_(False))

    def probabilities(self, tokenizer: Any, prompts: Sequence[str], batch_size: int = 4) -> list[float]:
        with torch.no_grad():
            return success_probability(self.head(prompt_features(self.backbone, tokenizer, prompts, batch_size))
                                       ).tolist()


class TunableOrm(nn.Module):
    """A causal-LM backbone under a trainable LoRA adapter + :class:`OrmHead`, trained end to end
    (:mod:`services.trainer.orm_backbone`). It reads what :class:`OrmClassifier` reads once published: the
    decoder's last hidden state at each prompt's last token (the LM head is never run)."""

    def __init__(self, backbone: Any, head: OrmHead) -> None:
        super().__init__()
        self.backbone = backbone  # a peft causal LM (its adapter is what is published)
        self.head = head.float()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits (B, 2) of right-padded prompts."""
        decoder = self.backbone.get_base_model().base_model  # e.g. LlamaModel, the adapter's layers in place
        out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return self.head(last_token_states(out.last_hidden_state, attention_mask))


def write_head(folder: Path, fit: HeadFit, backbone: dict[str, Any] | None = None) -> None:
    """The head's weights and the record of what it is and how it was fitted, into ``folder``; ``backbone`` records
    how the backbone was trained with it (absent: the backbone is the frozen one it was fitted on)."""
    save_file({k: v.contiguous() for k, v in fit.head.state_dict().items()}, str(folder / HEAD_FILE))
    config = {"kind": HEAD_KIND, "hidden_size": int(fit.head.mu.numel()), "n_classes": N_CLASSES,
              "features": "last hidden state at the prompt's last token, standardised",
              "p": "softmax(W z + b)[1]", "l2": fit.l2,
              "validation_balanced_accuracy": {str(k): v for k, v in fit.validation.items()},
              "n_train": fit.n_train, "n_validation": fit.n_validation}
    if backbone is not None:
        config["backbone_training"] = backbone
    (folder / HEAD_CONFIG_FILE).write_text(json.dumps(config, indent=2))
