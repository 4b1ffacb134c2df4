"""The stop contrast (``actor.stop_contrast``): which positives get twins and where, how they join their batch, and
on a real model: a pushed stop rises where the episode stopped and, with the contrast, not at the states before."""

from __future__ import annotations

import copy

import pytest

from services.trainer.actor_update import role_flags, update_actor
from services.trainer.data import SequenceItem, StepExample, sequence_collate
from services.trainer.intent_contrast import with_twins
from services.trainer.stop_contrast import earlier_states, is_stop, stop_twin_items
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare
from webrl.method.hyperparams import ActorLoss
from webrl.models.examples import encode_example, pad_id_of
from webrl.prompts.actor import render_actor_prompt

INTENT = 'Search the store for "yoga mat"'
HOME = '<html><body><a id="3">Electronics</a><input id="7" placeholder="Search"/></body></html>'
RESULTS = '<html><body><h1>Results for "yoga mat"</h1><a id="12">Yoga Mat, Blue</a></body></html>'
SEARCH = 'do(action="Search", argument="yoga mat", element="7")'
STOP = 'exit(message="")'


def _step(tokenizer, trajectory: int, index: int, page: str, history: list[str], completion: str) -> StepExample:
    prompt = render_actor_prompt(tokenizer, INTENT, history, page)
    return StepExample(trajectory_id=trajectory, task_key="t", phase=1, index=index, prompt=prompt,
                       next_prompt=prompt, completion=completion, completion_ids=(), reward=1.0,
                       done=completion == STOP, mc_return=1.0)


def _episode(tokenizer, trajectory: int = 1) -> list[StepExample]:
    """Search, Search, stop: the stop's earlier states are the home page and the first results page."""
    return [_step(tokenizer, trajectory, 0, HOME, [], SEARCH),
            _step(tokenizer, trajectory, 1, RESULTS, [SEARCH], SEARCH),
            _step(tokenizer, trajectory, 2, RESULTS, [SEARCH, SEARCH], STOP)]


def test_the_stop_is_the_exit_action() -> None:
    assert is_stop(STOP) and is_stop('exit(message="$56.50")')
    assert not is_stop(SEARCH) and not is_stop("I think we are done") and not is_stop("")


def test_a_stop_positive_gets_its_own_earlier_states_as_twins(tiny) -> None:
    _, tokenizer = tiny
    episode = _episode(tokenizer)
    other = _episode(tokenizer, trajectory=2)
    experience = [*other, *reversed(episode)]  # any order: the twins follow the step index
    assert [s.index for s in earlier_states(experience)[1]] == [0, 1, 2]
    first_stop = _step(tokenizer, 3, 0, HOME, [], STOP)  # stopped at once: no earlier state
    examples = [episode[2], episode[1], first_stop]  # the trained steps: a stop, a search, a first-step stop
    twins = stop_twin_items(tokenizer, examples, [0, 1, 2], [*experience, first_stop], first_index=3,
                            max_length=None, flags={"stop_twin": 0.0})
    assert list(twins) == [0]  # the search is no stop; the first-step stop has no state before it
    assert [it.index for it in twins[0]] == [3, 4] and all(it.scalars["stop_twin"] == 1.0 for it in twins[0])
    for twin, state in zip(twins[0], episode[:2], strict=True):
        assert twin.encoded.input_ids == encode_example(tokenizer, state.prompt, STOP).input_ids
    assert stop_twin_items(tokenizer, examples, [1], experience, first_index=3, max_length=None, flags={}) == {}

    flags = role_flags(ActorLoss(stop_contrast=1.0))
    assert flags == {"stop_twin": 0.0}
    items = [SequenceItem(i, encode_example(tokenizer, ex.prompt, ex.completion),
                          {"lp_ref": 0.0, "advantage": 1.0, **flags}) for i, ex in enumerate(examples)]
    batch = with_twins(sequence_collate(pad_id_of(tokenizer)), twins)(items[:2])
    assert batch["index"].tolist() == [0, 1, 3, 4] and batch["stop_twin"].tolist() == [0.0, 0.0, 1.0, 1.0]


def test_the_contrast_keeps_the_stop_where_the_episode_stopped(tiny, push) -> None:
    """The same unbounded push on the stop at the episode's last state: it rises there either way; at the first
    results page, where the episode went on, it rises with it without the contrast and far less with it."""
    _, tokenizer = tiny
    episode = _episode(tokenizer)
    examples = [episode[2]] * 4
    probe = [SequenceItem(0, encode_example(tokenizer, episode[2].prompt, STOP), {}),
             SequenceItem(1, encode_example(tokenizer, episode[1].prompt, STOP), {})]
    (own_free, earlier_free), _ = push(examples, ActorLoss(kl=False), probe, experience=episode)
    (own_held, earlier_held), last = push(examples, ActorLoss(kl=False, stop_contrast=30.0), probe,
                                          experience=episode)
    assert own_free > 1.0 and own_held > 1.0  # the stop rose where the episode stopped either way (measured +69, +5.5)
    assert earlier_free > 0.5 * own_free  # without the contrast the earlier page carried it too
    assert earlier_held < 0.2 * earlier_free, (earlier_held, earlier_free)
    assert "stop_log_ratio" in last


def test_without_stop_positives_the_update_is_the_plain_one(tiny) -> None:
    """No positive stops: no twin, the same batches and the same losses as with the contrast off."""
    model, tokenizer = tiny
    episode = _episode(tokenizer)

    def run(weight: float):
        loop = LoopConfig(lr=1e-3, epochs=2, batch_size=2, gradient_checkpointing=False)
        accelerator = make_accelerator(loop)
        return update_actor(accelerator, prepare(accelerator, copy.deepcopy(model), loop), tokenizer, episode[:2],
                            [1.0, 1.0], ActorLoss(kl=False, stop_contrast=weight), loop, max_length=256,
                            experience=episode)

    plain, contrast = run(0.0), run(1.0)
    assert plain.steps == contrast.steps == 2 and "stop_log_ratio" not in contrast.epochs[-1]
    assert contrast.first_loss == pytest.approx(plain.first_loss) and contrast.last_loss == pytest.approx(
        plain.last_loss)
