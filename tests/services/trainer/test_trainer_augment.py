"""Relabelled demonstrations (services/trainer/augment.py): every copy must still be a right demonstration of
its own world: the element an action names carries the name the intent asks for, under whatever id it has."""

from __future__ import annotations

import random
import re

from services.trainer.augment import (
    intent_entities,
    merge_names,
    names_by_kind,
    observations_of,
    relabel,
    relabelled_copies,
    renumber_ids,
    renumbered_copies,
    trajectory_names,
)
from services.trainer.data import StepExample
from webrl.agent.actions import parse_action
from webrl.agent.observed_page import ObservedPage
from webrl.agent.schemas import Observation, Step, Trajectory

URL = "http://127.0.0.1:7770/"
MENU = ('<html> <nav> <button id="0"> Shop by Category </button> <a id="1"> Electronics </a> '
        '<a id="2"> Grocery &amp; Gourmet Food </a> <a id="3"> Fragrance </a> <a id="4"> Snacks </a> </nav> '
        '<main> <h1> Welcome </h1> <ol> <li> <a id="5"> Pacer Pro Lantern, Beige </a> </li> '
        '<li> <a id="6"> Solace Conditioner, Navy </a> </li> </ol> </main> </html>')
LISTING = ('<html> <nav> <button id="0"> Shop by Category </button> </nav> <main> <h1> Grocery &amp; Gourmet Food '
           '</h1> <p> 12 products </p> <ol> <li> <a id="1"> Pacer Pro Lantern, Beige </a> </li> </ol> </main> </html>')


def _trajectory() -> Trajectory:
    steps = [
        Step(index=0, observation=Observation(html=MENU, url=URL),
             response='# Element: Grocery & Gourmet Food\ndo(action="Click", element="2")'),
        Step(index=1, observation=Observation(html=LISTING, url=URL + "category/grocery"),
             response='exit(message="12 products in Grocery & Gourmet Food")'),
    ]
    return Trajectory(task_id="t1", intent="How many products are in the Grocery & Gourmet Food category?",
                      steps=steps, last_observation=Observation(html=LISTING, url=URL + "category/grocery"))


def _label_of(html: str, element_id: str) -> str:
    return next(e.label for e in ObservedPage(html).elements if e.id == element_id)


def test_entity_swap_keeps_the_demonstrated_click_on_the_element_the_intent_names() -> None:
    traj = _trajectory()
    for seed in range(20):
        copy = relabel(traj, random.Random(seed), renumber=False)
        asked = re.search(r"in the (.+) category", copy.intent).group(1)
        assert asked != "Grocery & Gourmet Food"
        assert asked in {"Electronics", "Fragrance", "Snacks"}  # a menu item, never a product of the grid
        click = parse_action(copy.steps[0].response)
        assert _label_of(copy.steps[0].observation.html, click.element) == asked
        assert copy.steps[0].response.startswith(f"# Element: {asked}\n")
        # the world is relabelled, the answer with it: the listing the click opens is the asked category's
        assert f"<h1> {asked}" in copy.steps[1].observation.html
        assert copy.steps[1].response == f'exit(message="12 products in {asked}")'
        assert "Grocery &amp; Gourmet Food" in copy.steps[0].observation.html  # swapped, not lost
        assert copy.steps[0].token_ids == [] and copy.steps[0].action is None


def test_a_pool_name_the_pages_never_show_replaces_the_entity_escaped_in_the_html() -> None:
    traj = _trajectory().model_copy(update={"intent": "How many products are in the Fragrance category?"})
    pool = {"127.0.0.1:7770 html/nav/a": ["Home & Garden"]}
    copies = [relabel(traj, random.Random(seed), pool=pool, renumber=False) for seed in range(40)]
    from_pool = [c for c in copies if "Home & Garden" in c.intent]
    assert from_pool  # one in four options: 40 draws never miss it for these seeds
    for copy in from_pool:
        assert "<a id=\"3\"> Home &amp; Garden </a>" in copy.steps[0].observation.html
        assert "Fragrance" not in copy.steps[0].observation.html
        assert "&amp;" not in copy.intent


def test_renumbered_ids_are_distinct_and_the_action_follows_its_element() -> None:
    rng = random.Random(7)
    response = '# Element: Fragrance\ndo(action="Click", element="3")'
    for _ in range(20):
        page, new_response = renumber_ids(MENU, response, rng)
        ids = [e.id for e in ObservedPage(page).elements]
        assert len(ids) == len(set(ids)) == 7
        assert all(0 <= int(i) < 14 for i in ids)
        assert _label_of(page, parse_action(new_response).element) == "Fragrance"
        assert "# Element: Fragrance" in new_response


def test_a_trajectory_without_intent_entities_only_changes_ids() -> None:
    traj = _trajectory().model_copy(update={"intent": "Open the menu"})
    copy = relabel(traj, random.Random(1))
    assert copy.intent == "Open the menu"
    strip = re.compile(r'(id|element)="\d+"')
    assert strip.sub("", copy.steps[0].observation.html) == strip.sub("", MENU)
    assert copy.steps[0].observation.html != MENU  # the ids did change


def test_intent_entities_prefer_the_longest_name_and_the_list_it_belongs_to() -> None:
    names = names_by_kind(observations_of(_trajectory()))
    assert names["127.0.0.1:7770 html/nav/a"] == ["Electronics", "Grocery & Gourmet Food", "Fragrance", "Snacks"]
    found = intent_entities("Add Pacer Pro Lantern, Beige and Snacks", names)
    assert found == [("Pacer Pro Lantern, Beige", "127.0.0.1:7770 html/main/ol/li/a ,"),
                     ("Snacks", "127.0.0.1:7770 html/nav/a")]
    assert merge_names({"k": ["a", "b"]}, {"k": ["b", "c"], "j": ["d"]}) == {"k": ["a", "b", "c"], "j": ["d"]}


def test_copies_are_deterministic_and_differ_from_each_other() -> None:
    traj = _trajectory()
    first = relabelled_copies(traj, 4, seed=3)
    assert [c.model_dump() for c in first] == [c.model_dump() for c in relabelled_copies(traj, 4, seed=3)]
    given = relabelled_copies(traj, 4, seed=3, names=trajectory_names(traj))  # parsed by the caller
    assert [c.model_dump() for c in given] == [c.model_dump() for c in first]
    assert relabelled_copies(traj, 0, seed=3) == []
    assert len({c.steps[0].observation.html for c in first}) > 1


def _positive(prompt: str, completion: str) -> StepExample:
    return StepExample(trajectory_id=4, task_key="sandbox/train/9", phase=1, index=2, prompt=prompt,
                       next_prompt=prompt, completion=completion, completion_ids=(11, 12), reward=1.0, done=False,
                       mc_return=1.0)


def _element_text(page: str, completion: str) -> str:
    """The text of the element the completion's action names, read off the page."""
    element = re.search(r'element="(\d+)"', completion).group(1)  # type: ignore[union-attr]
    return re.search(rf'id="{element}"> ([^<]*) <', page).group(1)  # type: ignore[union-attr]


def test_a_renumbered_positive_clicks_the_same_element_under_a_new_id() -> None:
    """The copies of a positive (``actor.renumbered_positives``): the state's ids and the action's id renumbered
    together, so the action names the element it named; its generated token ids dropped; the copies differ from
    each other and are the same for the same seed."""
    step = _positive(f"Task Instruction: Add the lantern\n{MENU}\n", '# Element: Pacer Pro Lantern, Beige\n'
                     'do(action="Click", element="5")')
    copies = renumbered_copies(step, 3, seed=0)
    assert len(copies) == 3 and len({c.prompt for c in copies}) == 3
    for copy_ in copies:
        assert _element_text(copy_.prompt, copy_.completion) == "Pacer Pro Lantern, Beige"
        assert copy_.completion_ids == () and copy_.prompt.startswith("Task Instruction: Add the lantern\n")
        ids = re.findall(r'id="(\d+)"', copy_.prompt)
        assert len(ids) == len(set(ids)) == 7
    assert [c.prompt for c in renumbered_copies(step, 3, seed=0)] == [c.prompt for c in copies]
    assert [c.prompt for c in renumbered_copies(step, 3, seed=1)] != [c.prompt for c in copies]


def test_a_positive_whose_action_names_no_element_of_its_page_gets_no_copy() -> None:
    assert renumbered_copies(_positive(MENU, 'exit(message="")'), 2, seed=0) == []
    assert renumbered_copies(_positive(MENU, 'do(action="Click", element="42")'), 2, seed=0) == []
    assert renumbered_copies(_positive(MENU, 'do(action="Click", element="5")'), 0, seed=0) == []


def test_only_positives_get_copies_each_with_its_advantage() -> None:
    from services.trainer.actor_update import with_renumbered_positives

    click = 'do(action="Click", element="5")'
    steps = [_positive(MENU, click), _positive(MENU, 'do(action="Click", element="1")'), _positive(MENU, click)]
    examples, advantages = with_renumbered_positives(steps, [1.0, -0.6, 0.5], 2, seed=0)
    assert examples[:3] == steps and advantages == [1.0, -0.6, 0.5, 1.0, 1.0, 0.5, 0.5]
    assert all(_element_text(e.prompt, e.completion) == "Pacer Pro Lantern, Beige" for e in examples[3:])


def test_the_actor_update_trains_on_the_renumbered_copies(tiny) -> None:
    """With ``actor.renumbered_positives`` 2 the update's epoch holds each positive three times (a real model's
    forward and backward): 2 positives and 4 copies make 3 batches of 2 an epoch where the plain update makes 1."""
    import copy

    from services.trainer.actor_update import update_actor
    from services.trainer.training_loop import LoopConfig, make_accelerator, prepare
    from webrl.method.hyperparams import ActorLoss

    model, tokenizer = tiny
    steps = [_positive(f"Task Instruction: Add the lantern\n{MENU}\n", 'do(action="Click", element="5")'),
             _positive(f"Task Instruction: Show Snacks\n{MENU}\n", 'do(action="Click", element="4")')]

    def run(copies: int):
        loop = LoopConfig(lr=1e-3, epochs=2, batch_size=2, gradient_checkpointing=False)
        accelerator = make_accelerator(loop)
        return update_actor(accelerator, prepare(accelerator, copy.deepcopy(model), loop), tokenizer, steps,
                            [1.0, 1.0], ActorLoss(renumbered_positives=copies), loop, max_length=256)

    plain, renumbered = run(0), run(2)
    assert (plain.steps, renumbered.steps) == (2, 6)
    assert renumbered.last_loss == renumbered.last_loss and renumbered.last_loss != plain.last_loss  # finite, other
