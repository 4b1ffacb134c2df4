"""The intent contrast (``actor.intent_contrast``): which intents a positive's twin may carry, how twins join their
batch, the term by hand, and on a real model: the pushed action rises under its own intent and, with the contrast,
not under another's."""

from __future__ import annotations

import random

import pytest
import torch

from services.trainer.actor_update import update_actor
from services.trainer.data import SequenceItem, StepExample, sequence_collate
from services.trainer.intent_contrast import (
    ContrastIntent,
    TwinIntents,
    contrast_pool,
    contrast_term,
    intent_of,
    template_pattern,
    twin_items,
    with_intent,
    with_twins,
)
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare
from webrl.agent.schemas import TaskConfig
from webrl.method.hyperparams import ActorLoss
from webrl.models.examples import encode_example, pad_id_of
from webrl.prompts.actor import render_actor_prompt, render_llama3_webrl

CART = "Add {{product}} to my shopping cart"
WISH = "Add {{product}} to my wish list"
PRICE = "What is the price of {{product}}?"
POSTS = "Search for posts about {{query}}"
POOL = [ContrastIntent("shopping", CART, "Add Linea Notebook, Red to my shopping cart"),
        ContrastIntent("shopping", WISH, "Add Linea Notebook, Red to my wish list"),
        ContrastIntent("shopping", WISH, "Add Velo Bike Light, Blue to my wish list"),
        ContrastIntent("shopping", PRICE, "What is the price of Velo Bike Light, Blue?"),
        ContrastIntent("reddit", POSTS, "Search for posts about India")]
PAGE = '<html><body><a id="3">Electronics</a><a id="4">Books</a><input id="7" placeholder="Search"/></body></html>'
CLICK = 'do(action="Click", element="3")'


def test_a_template_matches_the_intents_it_instantiates() -> None:
    cart = template_pattern(CART)
    assert cart.match("Add Copper Kettle Olive Oil, Navy to my shopping cart")
    assert not cart.match("Add Copper Kettle Olive Oil, Navy to my wish list")
    assert not cart.match("Add  to my shopping cart")  # a slot is never empty
    assert template_pattern("What is (the) price?").match("What is (the) price?")  # the rest is literal
    assert not template_pattern("What is (the) price?").match("What is the price?")


def test_a_twin_carries_another_template_of_its_site() -> None:
    twins = TwinIntents(POOL)
    intent = "Add Copper Kettle Olive Oil, Navy to my shopping cart"  # an unseen instance of CART
    assert twins.templates_of(intent) == {CART}
    rng = random.Random(0)
    drawn = {twins.draw(intent, rng) for _ in range(200)}
    assert drawn == {c.intent for c in POOL if c.site == "shopping" and c.template != CART}
    assert twins.draw("Search for posts about Spain", rng) is None  # reddit has no other template
    assert twins.draw("Open the programming forum", rng) is None  # no known template
    again = [TwinIntents(POOL).draw(intent, random.Random(3)) for _ in range(2)]
    assert again[0] == again[1]  # seeded


def test_the_pool_keeps_each_templated_intent_once() -> None:
    def task(i: int, intent: str, template: str | None) -> TaskConfig:
        return TaskConfig(task_id=i, sites=["shopping"], intent=intent, start_url="/", intent_template=template)

    pool = contrast_pool([task(0, "Add A to my wish list", WISH), task(1, "Add A to my wish list", WISH),
                          task(2, "Find something nice", None)])
    assert pool == [ContrastIntent("shopping", WISH, "Add A to my wish list")]


def test_the_term_by_hand() -> None:
    lp = torch.tensor([-1.0, -4.0, -2.0])
    lp_ref = torch.tensor([-2.0, -3.0, -2.0])
    n = torch.tensor([2.0, 4.0, 1.0])
    term, ratio = contrast_term(lp, lp_ref, n)
    assert float(term) == pytest.approx((0.5 + 0.0 + 0.0) / 3)  # only the risen twin counts
    assert float(ratio) == pytest.approx((0.5 - 0.25 + 0.0) / 3)


def _example(tokenizer, intent: str, index: int = 0) -> StepExample:
    prompt = render_actor_prompt(tokenizer, intent, [], PAGE)
    return StepExample(trajectory_id=1, task_key="t", phase=1, index=index, prompt=prompt, next_prompt=prompt,
                       completion=CLICK, completion_ids=(), reward=1.0, done=True, mc_return=1.0)


def test_each_positive_brings_its_twin_into_its_batch(tiny) -> None:
    """Only positives whose template is known get a twin; a batch appends the twins of its own items."""
    _, tokenizer = tiny
    examples = [_example(tokenizer, "Add Copper Kettle Olive Oil, Navy to my shopping cart"),
                _example(tokenizer, "Open the programming forum"),
                _example(tokenizer, "What is the price of Linea Notebook, Red?")]
    twins = twin_items(tokenizer, examples, [0, 1, 2], POOL, first_index=3, seed=0, max_length=None,
                       flags={"contrast": 0.0})
    assert sorted(twins) == [0, 2] and sorted(it.index for it in twins.values()) == [3, 4]
    assert all(it.scalars["contrast"] == 1.0 for it in twins.values())
    assert "Add Copper Kettle" not in tokenizer.decode(twins[0].encoded.input_ids)
    items = [SequenceItem(i, encode_example(tokenizer, ex.prompt, ex.completion),
                          {"lp_ref": 0.0, "advantage": 1.0, "contrast": 0.0}) for i, ex in enumerate(examples)]
    batch = with_twins(sequence_collate(pad_id_of(tokenizer)), {i: [t] for i, t in twins.items()})(items[:2])
    assert batch["index"].tolist() == [0, 1, 3] and batch["contrast"].tolist() == [0.0, 0.0, 1.0]


def test_the_contrast_keeps_the_push_to_its_own_intent(tiny, push) -> None:
    """The same unbounded push on one action under one intent: it rises under that intent either way; under another
    template's intent it rises as much without the contrast (measured: +77 nats both), and a fraction with it."""
    _, tokenizer = tiny
    examples = [_example(tokenizer, "Add Copper Kettle Olive Oil, Navy to my shopping cart", i) for i in range(4)]
    others = [ContrastIntent("shopping", WISH, "Add Velo Bike Light, Blue to my wish list")]
    held_out = _example(tokenizer, "Add Velo Bike Light, Blue to my wish list")  # the twin's intent
    probe = [SequenceItem(0, encode_example(tokenizer, examples[0].prompt, CLICK), {}),
             SequenceItem(1, encode_example(tokenizer, held_out.prompt, CLICK), {})]
    (own_free, other_free), _ = push(examples, ActorLoss(kl=False), probe)
    (own_held, other_held), last = push(examples, ActorLoss(kl=False, intent_contrast=30.0), probe,
                                        contrast=POOL[:1] + others)
    assert own_free > 1.0 and own_held > 1.0  # the pushed action rose under its own intent either way
    assert other_free > 0.9 * own_free  # without the contrast the page alone carried it
    assert other_held < 0.2 * other_free, (other_held, other_free)
    assert other_held < 0.5 * own_held, (other_held, own_held)  # with it the push goes to its own intent
    assert "contrast_log_ratio" in last


def test_the_contrast_without_train_intents_is_refused(tiny) -> None:
    model, tokenizer = tiny
    loop = LoopConfig(lr=1e-3, epochs=1, batch_size=2, gradient_checkpointing=False)
    accelerator = make_accelerator(loop)
    with pytest.raises(ValueError, match="intent_contrast"):
        update_actor(accelerator, prepare(accelerator, model, loop), tokenizer,
                     [_example(tokenizer, "Add A to my shopping cart")], [1.0], ActorLoss(intent_contrast=1.0), loop,
                     max_length=256)


@pytest.mark.parametrize("history", [[], ['do(action="Scroll Down")']])
def test_the_intent_is_read_and_swapped_in_both_renderings(tiny, history: list[str]) -> None:
    """``with_intent`` gives the prompt the other intent would have rendered: the same page, history and layout."""
    _, tokenizer = tiny
    intent, other = "Add Linea Notebook, Red to my shopping cart", "Add Velo Bike Light, Blue to my wish list"
    for render in (lambda i: render_actor_prompt(tokenizer, i, history, PAGE),
                   lambda i: render_llama3_webrl(i, history, PAGE)):
        prompt = render(intent)
        assert intent_of(prompt) == intent
        assert with_intent(prompt, intent, other) == render(other)
    with pytest.raises(ValueError, match="Task Instruction"):
        intent_of(PAGE)
    with pytest.raises(ValueError, match="does not ask"):
        with_intent(render_llama3_webrl(intent, [], PAGE), other, intent)
