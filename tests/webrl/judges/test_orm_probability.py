"""P(YES) from the real logits of a real tiny Llama, batched and unbatched."""

from __future__ import annotations

import math

import pytest
import torch

from webrl.models.orm import orm_probabilities, yes_no_token_ids
from webrl.prompts.orm_prompt import render_llama3_orm


def _prompts() -> list[str]:
    return [
        render_llama3_orm("Add the blue kettle to the cart", ['do(action="Click", element="7")'],
                          '<div id="5">Order placed</div>'),
        render_llama3_orm("Find the price", [], "<p>price</p>" * 30),
        render_llama3_orm("Open the reviews", ['do(action="Scroll Down")', 'exit(message="4 stars")'],
                          '<div id="6">Error</div>' * 7),
    ]


def test_yes_and_no_are_distinct_tokens(tiny_llama3) -> None:
    _, _, tokenizer = tiny_llama3
    yes, no = yes_no_token_ids(tokenizer)
    assert yes != no
    assert tokenizer.decode([yes]).startswith("Y") and tokenizer.decode([no]).startswith("N")


def test_p_is_the_two_way_softmax_of_the_last_logits(tiny_llama3) -> None:
    _, model, tokenizer = tiny_llama3
    yes, no = yes_no_token_ids(tokenizer)
    prompt = _prompts()[0]
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        last = model(ids).logits[0, -1]
    expected = math.exp(last[yes].item()) / (math.exp(last[yes].item()) + math.exp(last[no].item()))
    (p,) = orm_probabilities(model, tokenizer, [prompt])
    assert p == pytest.approx(expected, abs=1e-6)
    assert 0.0 < p < 1.0


def test_batched_equals_unbatched(tiny_llama3) -> None:
    _, model, tokenizer = tiny_llama3
    prompts = _prompts()
    one_by_one = [orm_probabilities(model, tokenizer, [p])[0] for p in prompts]
    batched = orm_probabilities(model, tokenizer, prompts, batch_size=3)
    assert batched == pytest.approx(one_by_one, abs=1e-5)
    assert len({round(p, 6) for p in batched}) == 3  # different prompts, different judgements

