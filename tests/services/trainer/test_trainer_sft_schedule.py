"""The SFT options ``webrl bootstrap`` uses: warm-up + cosine learning rate, and the auxiliary prompt loss."""

from __future__ import annotations

import math

import pytest
import torch

from services.trainer.sft import sft_loss_fn, sft_with_prompt_loss_fn
from services.trainer.training_loop import LoopConfig, lr_factor, make_accelerator, prepare
from webrl.models.examples import collate, encode_example, pad_id_of


def test_lr_factor_warms_up_linearly_then_decays_by_cosine_to_the_floor() -> None:
    assert [lr_factor(s, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]  # constant after warm-up
    assert lr_factor(4, 4, decay_steps=10, min_ratio=0.1) == 1.0
    assert lr_factor(9, 4, decay_steps=10, min_ratio=0.1) == pytest.approx(0.1 + 0.9 * 0.5)  # half-way: cos = 0
    assert lr_factor(14, 4, decay_steps=10, min_ratio=0.1) == pytest.approx(0.1)
    assert lr_factor(99, 4, decay_steps=10, min_ratio=0.1) == pytest.approx(0.1)  # held at the floor
    assert lr_factor(0, 0, decay_steps=8, min_ratio=0.0) == 1.0
    assert lr_factor(2, 0, decay_steps=8, min_ratio=0.0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


def test_prepared_scheduler_follows_lr_factor(tiny) -> None:
    model, _ = tiny
    config = LoopConfig(lr=1e-3, warmup_steps=2, decay_steps=4, min_lr_ratio=0.1)
    prepared = prepare(make_accelerator(config), model, config)
    seen = []
    for _ in range(7):
        seen.append(prepared.optimizer.param_groups[0]["lr"])
        prepared.optimizer.step()
        prepared.scheduler.step()
    assert seen == pytest.approx([1e-3 * lr_factor(s, 2, 4, 0.1) for s in range(7)])


def test_prompt_loss_adds_the_weighted_prompt_term(tiny) -> None:
    model, tokenizer = tiny
    encoded = [encode_example(tokenizer, "Show me the Books category", 'do(action="Click", element="4")'),
               encode_example(tokenizer, "Search for a laptop", 'do(action="Type", argument="laptop", element="7")')]
    batch = collate(encoded, pad_id_of(tokenizer))
    assert sft_with_prompt_loss_fn(0.0) is sft_loss_fn
    with torch.no_grad():
        base, _ = sft_loss_fn(model, batch)
        total, metrics = sft_with_prompt_loss_fn(0.5)(model, batch)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (B, T, V)
    logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    prompt = (batch["attention_mask"].bool() & ~batch["target_mask"].bool())[:, 1:]  # (B, T-1), position 0 excluded
    expected = -(logp * prompt).sum() / prompt.sum()
    assert metrics["prompt_loss"] == pytest.approx(float(expected), rel=1e-4)
    assert float(total) == pytest.approx(float(base) + 0.5 * float(expected), rel=1e-4)
