"""The head ORM with its backbone trained too: a LoRA adapter and the head, end to end
(``OrmHeadJob.backbone_epochs``; :func:`services.trainer.orm_head_fit.run_orm_head` calls it).

A linear read of a frozen 135M model's last state separates which policy wrote a trajectory better than whether it
succeeded (held-out accuracy 0.75-0.80 whatever the labels, docs/measurements.md), so here the backbone learns to
read the page for the verdict:

- start: the frozen head fitted on the training tasks that are not held out (:func:`webrl.models.orm_head.fit_head`
  at the lambda :func:`~webrl.models.orm_head.choose_and_fit` chose) and the ORM start's adapter (B = 0 when it
  is new, so training starts from that frozen head on the unchanged backbone)
- L(theta, W, b) = sum_i w_{y_i} CE(W z_i + b, y_i) / sum_i w_{y_i} + lambda ||W||^2,
  z_i = (h_theta(x_i) - mu) / sigma, h_theta the adapted backbone's last-token state    # AdamW on theta, W, b
- after every epoch, balanced accuracy on the held-out training tasks (those that chose lambda), ties broken by
  the balanced log-loss there; the epoch that scores best is kept (early stopping; epoch 0 is the frozen head,
  refitted on every task as without this option)
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from services.trainer.training_loop import LoopConfig, evaluate, make_accelerator, prepare, prepared_loader, train
from webrl.models.orm_head import (
    HeadFit,
    OrmHead,
    TunableOrm,
    balanced_accuracy,
    balanced_class_weights,
    balanced_log_loss,
    fit_head,
    success_probability,
)

log = logging.getLogger("webrl.trainer.orm_backbone")

#: Called after each epoch with its record (epoch, loss, validation balanced accuracy, seconds, ...) and the model
#: as that epoch left it (:class:`~webrl.models.orm_head.TunableOrm`; None for epoch 0, the frozen head).
EpochHook = Callable[[dict[str, float], TunableOrm | None], None]


@dataclass(frozen=True)
class PromptItem:
    """One encoded ORM prompt and its 0/1 label; ``index`` is its row in the job's data."""

    index: int
    input_ids: list[int]
    label: int


def prompt_collate(pad_id: int) -> Callable[[list[PromptItem]], dict[str, torch.Tensor]]:
    """Right-padded ``input_ids`` / ``attention_mask`` (B, T), ``labels`` and ``index`` (B,)."""

    def fn(items: list[PromptItem]) -> dict[str, torch.Tensor]:
        width = max(len(it.input_ids) for it in items)
        input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, it in enumerate(items):
            input_ids[row, : len(it.input_ids)] = torch.tensor(it.input_ids, dtype=torch.long)
            mask[row, : len(it.input_ids)] = 1
        return {"input_ids": input_ids, "attention_mask": mask,
                "labels": torch.tensor([it.label for it in items], dtype=torch.long),
                "index": torch.tensor([it.index for it in items], dtype=torch.long)}

    return fn


def encode_prompts(tokenizer: Any, prompts: Sequence[str], labels: torch.Tensor) -> list[PromptItem]:
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    if any(len(ids) == 0 for ids in encoded):
        raise ValueError("an ORM prompt encodes to no tokens")
    return [PromptItem(i, ids, int(y)) for i, (ids, y) in enumerate(zip(encoded, labels.tolist(), strict=True))]


def head_loss_fn(class_weights: torch.Tensor, l2: float) -> Callable[[Any, dict], tuple[torch.Tensor, dict]]:
    """The balanced cross-entropy + lambda ||W||^2 of :func:`webrl.models.orm_head.fit_head`, on one batch."""

    def fn(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch["input_ids"], batch["attention_mask"])  # (B, 2)
        labels = batch["labels"]
        weights = class_weights.to(logits.device)[labels]  # (B,)
        ce = (nn.functional.cross_entropy(logits.float(), labels, reduction="none") * weights).sum() / weights.sum()
        head = model.module.head if hasattr(model, "module") else model.head  # DDP/DeepSpeed wrap the module
        loss = ce + l2 * head.linear.weight.pow(2).sum()
        return loss, {"loss": float(loss.detach()), "ce": float(ce.detach())}

    return fn


@dataclass
class BackboneFit:
    """What training the backbone gave: the kept epoch's head and adapter weights (None when the frozen head,
    epoch 0, scored best on the held-out tasks) and every epoch's record."""

    epoch: int
    head: OrmHead | None
    adapter_state: dict[str, torch.Tensor] | None
    history: list[dict[str, float]] = field(default_factory=list)


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """A CPU copy of the trainable (adapter) weights of a peft model."""
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad}


def train_backbone(model: Any, tokenizer: Any, prompts: Sequence[str], labels: torch.Tensor,
                   held_out: torch.Tensor, start: HeadFit, features: torch.Tensor, config: LoopConfig,
                   on_epoch: EpochHook | None = None) -> BackboneFit:
    """Train ``model`` (a peft causal LM whose adapter is trainable) with a head on the prompts outside
    ``held_out`` (a (N,) bool mask of whole tasks) for ``config.epochs`` epochs; see the module docstring.

    ``start`` is :func:`~webrl.models.orm_head.choose_and_fit`'s result on ``features`` (the frozen backbone's
    states of the same prompts): its lambda, and its validation score as epoch 0's."""
    if not start.validation:
        raise ValueError("training the backbone needs held-out training tasks with both labels to choose the "
                         "epoch: give more tasks")
    train_rows = (~held_out).nonzero().flatten().tolist()
    val_rows = held_out.nonzero().flatten().tolist()
    items = encode_prompts(tokenizer, prompts, labels)
    head = fit_head(features[~held_out], labels[~held_out], start.l2).requires_grad_(False)
    head.linear.requires_grad_(True)
    orm = TunableOrm(model, head)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    accelerator = make_accelerator(config)
    one_epoch = replace(config, epochs=1)
    prepared = prepare(accelerator, orm, one_epoch)
    train_items = [items[i] for i in train_rows]
    val_items = [PromptItem(n, items[i].input_ids, items[i].label) for n, i in enumerate(val_rows)]
    loader = prepared_loader(accelerator, train_items, [len(it.input_ids) for it in train_items],
                             prompt_collate(pad), config.batch_size, shuffle=True, seed=config.seed)
    val_loader = prepared_loader(accelerator, val_items, [len(it.input_ids) for it in val_items],
                                 prompt_collate(pad), config.batch_size, shuffle=False, seed=config.seed)
    val_labels = labels[held_out]
    loss_fn = head_loss_fn(balanced_class_weights(labels[~held_out]), start.l2)

    def scored(p: torch.Tensor) -> dict[str, float]:
        return {"validation_balanced_accuracy": balanced_accuracy(p, val_labels),
                "validation_log_loss": balanced_log_loss(p, val_labels)}

    def validation() -> dict[str, float]:
        p = evaluate(accelerator, prepared.model, val_loader,
                     lambda m, b: {"p": success_probability(m(b["input_ids"], b["attention_mask"]))}, len(val_items))
        return scored(torch.tensor(p["p"]))

    def rank(record: dict[str, float]) -> tuple[float, float]:
        return record["validation_balanced_accuracy"], -record["validation_log_loss"]

    with torch.no_grad():
        frozen = scored(success_probability(head(features[held_out])))
    best = BackboneFit(epoch=0, head=None, adapter_state=None, history=[{"epoch": 0, **frozen, "seconds": 0.0}])
    if on_epoch is not None:
        on_epoch(best.history[0], None)
    for epoch in range(1, config.epochs + 1):
        started = time.monotonic()
        summary = train(accelerator, prepared, loader, loss_fn, one_epoch)
        record = {"epoch": epoch, "loss": summary.metrics.get("loss", float("nan")), **validation(),
                  "steps": summary.steps, "seconds": time.monotonic() - started}
        best.history.append(record)
        log.info("orm backbone: epoch %d loss %.4f validation balanced accuracy %.3f log-loss %.4f (%.0f s)", epoch,
                 record["loss"], record["validation_balanced_accuracy"], record["validation_log_loss"],
                 record["seconds"])
        if on_epoch is not None:
            on_epoch(record, accelerator.unwrap_model(prepared.model))
        if rank(record) > rank(best.history[best.epoch]):
            unwrapped = accelerator.unwrap_model(prepared.model)
            best.epoch = epoch
            best.head = copy.deepcopy(unwrapped.head).cpu().eval().requires_grad_(False)
            best.adapter_state = adapter_state(unwrapped.backbone)
        if summary.stopped_early:
            break
    return best
