"""encode_example / collate and the log-prob gatherers, checked against a full log_softmax by hand."""

from __future__ import annotations

import math

import pytest
import torch

from webrl.models.examples import (
    EncodedExample,
    collate,
    encode_example,
    encode_example_ids,
    end_of_turn_id,
)
from webrl.models.logprobs import (
    confidence,
    sequence_logprobs,
    sequence_logprobs_and_entropy,
    token_logprobs,
    token_logprobs_and_entropy,
)

ACTION = 'do(action="Click", element="3")'


def test_encode_example_targets_the_completion_and_the_end_of_turn(tiny_lm) -> None:
    _, tok = tiny_lm
    prompt_ids = tok("Show me", add_special_tokens=False)["input_ids"]
    action_ids = tok(ACTION, add_special_tokens=False)["input_ids"]
    ex = encode_example(tok, "Show me", ACTION)
    eot = end_of_turn_id(tok)
    assert tok.convert_ids_to_tokens(eot) == "<|eot_id|>"
    assert ex.input_ids == prompt_ids + action_ids + [eot]
    assert ex.target_mask == [0] * len(prompt_ids) + [1] * (len(action_ids) + 1)
    assert ex.n_target == len(action_ids) + 1


def test_encode_example_ids_keeps_generated_ids_and_adds_eot_once(tiny_lm) -> None:
    _, tok = tiny_lm
    eot = end_of_turn_id(tok)
    with_eot = encode_example_ids(tok, "Show me", [11, 12, eot])
    without = encode_example_ids(tok, "Show me", [11, 12])
    assert with_eot == without
    assert with_eot.input_ids[-3:] == [11, 12, eot]


def test_long_prompts_lose_their_left_side_never_the_completion(tiny_lm) -> None:
    _, tok = tiny_lm
    ex = encode_example(tok, "Show me the products " * 20, ACTION, max_length=20)
    full = encode_example(tok, "Show me the products " * 20, ACTION)
    assert len(ex) == 20
    assert ex.input_ids == full.input_ids[-20:]
    assert ex.target_mask[-full.n_target:] == [1] * full.n_target


def test_collate_right_pads_to_the_batch_max() -> None:
    batch = collate([EncodedExample([5, 6, 7], [0, 1, 1]), EncodedExample([8], [1])], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["target_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
    with pytest.raises(ValueError):
        collate([], pad_id=0)


def _by_hand(model, ids: list[int], mask: list[int]) -> list[float]:
    """log softmax of the full logits, read at each target token: the definition."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()  # (T, V)
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[t - 1, ids[t]]) if mask[t] and t > 0 else 0.0 for t in range(len(ids))]


def _two_examples(tok) -> tuple[list[EncodedExample], dict[str, torch.Tensor]]:
    """Two examples of different lengths (so one row is padded) and their collated batch."""
    examples = [encode_example(tok, "Show me the products in Electronics", ACTION),
                encode_example(tok, "Show", 'exit(message="ok")')]
    return examples, collate(examples, tok.pad_token_id)


def test_token_logprobs_match_log_softmax_and_ignore_padding(tiny_lm) -> None:
    model, tok = tiny_lm
    examples, batch = _two_examples(tok)
    with torch.no_grad():
        per_token = token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
        lp, n = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
    for row, ex in enumerate(examples):
        expected = _by_hand(model, ex.input_ids, ex.target_mask)
        got = per_token[row, : len(ex)].tolist()
        assert got == pytest.approx(expected, abs=1e-4)
        assert per_token[row, len(ex):].abs().sum() == 0  # padding contributes nothing
        assert float(lp[row]) == pytest.approx(sum(expected), abs=1e-3)
        assert float(n[row]) == ex.n_target
    c = confidence(lp, n)
    assert c.tolist() == pytest.approx([math.exp(float(lp[i]) / float(n[i])) for i in range(2)], rel=1e-5)
    assert all(0 < v < 1 for v in c.tolist())


def test_logprobs_carry_gradients(tiny_lm) -> None:
    model, tok = tiny_lm
    batch = collate([encode_example(tok, "Show me", ACTION)], tok.pad_token_id)
    lp, _ = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
    lp.sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    model.zero_grad()


def test_entropy_is_the_policys_per_token_entropy_on_targets_only(tiny_lm) -> None:
    """H_t = -sum_v p log p of the next-token distribution at each target, by hand from a full forward."""
    model, tok = tiny_lm
    examples, batch = _two_examples(tok)
    with torch.no_grad():
        per_token, entropy = token_logprobs_and_entropy(model, batch["input_ids"], batch["attention_mask"],
                                                        batch["target_mask"])
        lp, n, mean = sequence_logprobs_and_entropy(model, batch["input_ids"], batch["attention_mask"],
                                                    batch["target_mask"])
        expected_lp = token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
    assert torch.allclose(per_token, expected_lp) and torch.allclose(lp, per_token.sum(1))
    total = 0.0
    for row, ex in enumerate(examples):
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([ex.input_ids])).logits[0].float().log_softmax(-1)  # (T, V)
        for t in range(1, len(ex)):
            h = float(-(logp[t - 1].exp() * logp[t - 1]).sum()) if ex.target_mask[t] else 0.0
            assert float(entropy[row, t]) == pytest.approx(h, abs=1e-4)
            total += h
        assert entropy[row, len(ex):].abs().sum() == 0
    assert mean == pytest.approx(total / float(n.sum()), abs=1e-4)
    assert 0 < mean <= math.log(model.config.vocab_size)
