"""One real training step of the tiny Llama through the Accelerate loop lowers its loss on that batch."""

from __future__ import annotations

import math

import torch

from services.trainer.actor_update import actor_loss_fn
from services.trainer.data import SequenceItem, sequence_collate
from services.trainer.losses import actor_loss, sft_loss
from services.trainer.sft import sft_loss_fn
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare, prepared_loader, train
from webrl.method.hyperparams import ActorLoss
from webrl.models.examples import collate, encode_example, pad_id_of
from webrl.models.logprobs import sequence_logprobs, token_logprobs

PAIRS = [("Show me Books", 'do(action="Click", element="4")'),
         ("Show me the products in the Electronics category", 'do(action="Click", element="3")'),
         ("Search for a laptop", 'do(action="Type", argument="laptop", element="7")')]


def _encoded(tokenizer):
    return [encode_example(tokenizer, p, c) for p, c in PAIRS]


def _on(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The batch's ids and masks on ``model``'s device (the accelerator moved it to the GPU where there is one)."""
    device = next(model.parameters()).device
    return tuple(batch[k].to(device) for k in ("input_ids", "attention_mask", "target_mask"))  # type: ignore[return-value]


def _checkpointing(model) -> bool:
    """Whether activation checkpointing is on: ``is_activation_checkpointing`` where transformers has it (5.24),
    else ``is_gradient_checkpointing`` (5.17, seen on a GPU machine)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(model.is_gradient_checkpointing if flag is None else flag)


def test_one_sft_step_lowers_the_batch_loss(tiny) -> None:
    model, tokenizer = tiny
    encoded = _encoded(tokenizer)
    batch = collate(encoded, pad_id_of(tokenizer))
    before_params = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        before, _ = sft_loss(token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"]),
                             batch["target_mask"])
    config = LoopConfig(lr=1e-2, batch_size=len(encoded))
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    items = [SequenceItem(i, e, {}) for i, e in enumerate(encoded)]
    loader = prepared_loader(accelerator, items, [len(e) for e in encoded], sequence_collate(pad_id_of(tokenizer)),
                             config.batch_size, shuffle=False, seed=0)
    summary = train(accelerator, prepared, loader, sft_loss_fn, config)
    assert summary.steps == 1 and summary.samples == 3
    with torch.no_grad():
        ids, mask, target = _on(model, batch)
        after, _ = sft_loss(token_logprobs(model, ids, mask, target), target)
    assert float(after) < float(before)
    assert any(not torch.equal(a, b.cpu()) for a, b in zip(before_params, model.parameters(), strict=True))


def test_one_actor_step_lowers_the_actor_loss_and_keeps_kl_finite(tiny) -> None:
    model, tokenizer = tiny
    encoded = _encoded(tokenizer)
    batch = collate(encoded, pad_id_of(tokenizer))
    with torch.no_grad():
        lp_ref, n = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
    advantage = torch.tensor([1.0, 1.0, -0.6])
    before, m0 = actor_loss(lp_ref.clone(), lp_ref, n, advantage)
    assert m0["log_ratio_k1"] == 0.0
    config = LoopConfig(lr=5e-3, batch_size=3, max_grad_norm=1.0)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    items = [SequenceItem(i, e, {"lp_ref": float(lp_ref[i]), "advantage": float(advantage[i])})
             for i, e in enumerate(encoded)]
    loader = prepared_loader(accelerator, items, [len(e) for e in encoded], sequence_collate(pad_id_of(tokenizer)),
                             3, shuffle=False, seed=0)
    summary = train(accelerator, prepared, loader, actor_loss_fn(ActorLoss()), config)
    assert summary.steps == 1
    assert summary.metrics["grad_norm"] > 0
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, *_on(model, batch))
    lp = lp.cpu()
    after, m1 = actor_loss(lp, lp_ref, n, advantage)
    assert float(after) < float(before)
    assert math.isfinite(m1["log_ratio_k1"]) and m1["log_ratio_k1"] != 0.0
    assert float(lp[0] + lp[1]) > float(lp_ref[0] + lp_ref[1])  # positive-advantage actions became likelier


def test_gradient_checkpointing_is_on_for_training_and_leaves_the_gradients_unchanged(tiny_dir) -> None:
    """prepare() turns activation checkpointing on (the memory of a phase's critic step halves); the gradients of
    one step equal those computed keeping every activation."""
    from services.trainer.sft import load_for_training

    def grads(checkpointing: bool) -> list[torch.Tensor]:
        model, tokenizer = load_for_training(tiny_dir)
        config = LoopConfig(lr=1e-2, batch_size=len(PAIRS), gradient_checkpointing=checkpointing)
        prepared = prepare(make_accelerator(config), model, config)
        assert _checkpointing(prepared.model) is checkpointing
        prepared.model.train()
        batch = collate(_encoded(tokenizer), pad_id_of(tokenizer))
        lp, _ = sequence_logprobs(prepared.model, *_on(prepared.model, batch))
        lp.sum().backward()
        return [p.grad.clone() for p in prepared.model.parameters() if p.grad is not None]

    kept, recomputed = grads(False), grads(True)
    assert len(kept) == len(recomputed) > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(kept, recomputed, strict=True))
