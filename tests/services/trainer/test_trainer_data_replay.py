"""Training data from the DB, length-bucketed batches, and the replay filter."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from services.trainer import replay
from services.trainer.data import (
    StepExample,
    actor_prompt_fn,
    bucket_batches,
    demonstration_examples,
    first_success_examples,
    load_phase_examples,
)
from webrl.db.session import session_scope
from webrl.method.hyperparams import Replay

RUN = 3  # the run being trained: these tests store its rows, and another run's beside them

CLICK, TYPE, EXIT = 'do(action="Click", element="3")', 'do(action="Type", argument="laptop", element="7")', \
    'exit(message="done")'


def _prompt(intent: str, history, html: str) -> str:
    return f"{intent}|{len(history)}|{html[:20]}"


def test_phase_examples_carry_reward_returns_and_next_states(store_trajectory, db) -> None:
    store = partial(store_trajectory, run_id=RUN)
    ok = store("t1", 1, 0, [CLICK, TYPE, EXIT], reward=1.0)
    store("t2", 1, 0, [CLICK], reward=0.0)
    store("t3", 1, 0, [CLICK], reward=None)  # unlabelled: skipped
    store("t4", 2, 0, [CLICK], reward=1.0)  # another phase
    store_trajectory("t1", 1, 0, [EXIT], reward=1.0, run_id=RUN + 1)  # another run's rollout of t1
    with session_scope(db) as session:
        examples = load_phase_examples(session, 1, _prompt, run_id=RUN)
    assert [(e.task_key, e.index) for e in examples] == [("t1", 0), ("t1", 1), ("t1", 2), ("t2", 0)]
    first = [e for e in examples if e.trajectory_id == ok]
    assert [e.reward for e in first] == [1.0, 1.0, 1.0]
    assert [e.mc_return for e in first] == pytest.approx([2.71, 1.9, 1.0])
    assert [e.done for e in first] == [False, False, True]
    assert first[0].next_prompt == first[1].prompt and first[1].next_prompt == first[2].prompt
    assert first[2].next_prompt == "Show me t1|3|" + "<html><body><a id=\"3"  # the page after the last action
    assert first[1].completion == TYPE
    failed = examples[-1]
    assert failed.reward == 0.0 and failed.mc_return == 0.0


def test_episodes_the_machinery_ended_are_not_the_actor_s_experience(store_trajectory, db) -> None:
    """A crashed browser or a site that did not answer ended the episode, not the actor: left out of the phase."""
    from webrl.db import models as m

    kept = store_trajectory("t1", 1, 0, [CLICK], reward=0.0, run_id=RUN)
    down = store_trajectory("t2", 1, 0, [CLICK], reward=0.0, run_id=RUN)
    with session_scope(db) as session:
        session.get(m.TrajectoryRow, down).stop_reason = "site_unreachable"
    with session_scope(db) as session:
        examples = load_phase_examples(session, 1, _prompt, run_id=RUN)
    assert [e.trajectory_id for e in examples] == [kept]


def test_a_trajectory_s_reward_is_the_run_s_orm_label(store_trajectory, db) -> None:
    """Another ORM's later label never stands in for the run's ORM's; without a version the latest label counts."""
    from webrl.db.repository import save_label

    judged = store_trajectory("t1", 1, 0, [CLICK, EXIT], reward=1.0, run_id=RUN)  # "orm-test" says YES
    store_trajectory("t2", 2, 0, [CLICK], reward=0.0, run_id=RUN)
    with session_scope(db) as session:
        save_label(session, judged, "orm-other", p_yes=0.0, threshold=0.5)  # a later ORM says NO
    with session_scope(db) as session:
        run_orm = load_phase_examples(session, 1, _prompt, run_id=RUN, orm_version="orm-test")
        latest = load_phase_examples(session, 1, _prompt, run_id=RUN)
        unjudged = load_phase_examples(session, 1, _prompt, run_id=RUN, orm_version="orm-never")
        replayed = first_success_examples(session, 2, _prompt, run_id=RUN, orm_version="orm-test")
    assert [e.reward for e in run_orm] == [1.0, 1.0]
    assert [e.reward for e in latest] == [0.0, 0.0]
    assert unjudged == []  # no label by the run's ORM: skipped, as an unlabelled trajectory
    assert [e.trajectory_id for e in replayed] == [judged, judged]


def test_real_actor_prompt_renders(tiny) -> None:
    _, tokenizer = tiny
    prompt = actor_prompt_fn(tokenizer, max_tokens=200)("Show me Books", [], "<a id=\"4\">Books</a>")
    assert prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n")
    assert len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) <= 200


def test_first_success_per_task_from_earlier_phases_only(store_trajectory, db) -> None:
    store = partial(store_trajectory, run_id=RUN)
    store("a", 1, 0, [CLICK], reward=0.0)  # failure
    first = store("a", 1, 1, [CLICK, EXIT], reward=1.0)  # first success of task a
    store("a", 2, 0, [TYPE], reward=1.0)  # a later success of a: not replayed
    b = store("b", 2, 0, [EXIT], reward=1.0)
    store("c", 3, 0, [EXIT], reward=1.0)  # the phase being trained: excluded
    store_trajectory("d", 1, 0, [EXIT], reward=1.0, run_id=RUN + 1)  # another run's success: not this actor's
    with session_scope(db) as session:
        examples = first_success_examples(session, 3, _prompt, run_id=RUN)
    assert [(e.trajectory_id, e.index) for e in examples] == [(first, 0), (first, 1), (b, 0)]


def test_demonstrations_are_the_runs_successful_sft_episodes_by_env_score(store_trajectory, db) -> None:
    store = partial(store_trajectory, run_id=RUN, reward=None, purpose="sft")
    solved = store("a", 0, 1, [CLICK, EXIT], env_score=1.0)
    store("b", 0, 1, [CLICK], env_score=0.0)  # the oracle failed: no anchor
    store("c", 0, 1, [CLICK], env_score=None)  # not evaluated
    store_trajectory("d", 0, 1, [EXIT], reward=None, env_score=1.0, purpose="sft", run_id=RUN + 1)  # another run
    store_trajectory("e", 0, 0, [EXIT], reward=1.0, env_score=1.0, run_id=RUN)  # a seed rollout, not a demo
    with session_scope(db) as session:
        examples = demonstration_examples(session, _prompt, run_id=RUN)
    assert [(e.trajectory_id, e.index) for e in examples] == [(solved, 0), (solved, 1)]
    assert [e.reward for e in examples] == [1.0, 1.0] and examples[0].mc_return == pytest.approx(1.9)


def test_select_demonstrations_takes_ratio_times_the_positive_steps() -> None:
    pool = [_ex(i) for i in range(10)]
    anchor = replay.select_demonstrations(pool, 3, seed=0, replay=Replay(demo_tasks=5, demo_ratio=2.0))
    assert len(anchor) == 6 and len({e.trajectory_id for e in anchor}) == 6
    assert anchor == replay.select_demonstrations(pool, 3, seed=0, replay=Replay(demo_tasks=5, demo_ratio=2.0))
    assert len(replay.select_demonstrations(pool, 3, replay=Replay(demo_ratio=0.5))) == 1  # floor(1.5)
    assert len(replay.select_demonstrations(pool, 9, replay=Replay(demo_ratio=2.0))) == 10  # all there are
    assert replay.select_demonstrations(pool, 0, replay=Replay(demo_ratio=2.0)) == []  # no update, no anchor


def _ex(i: int) -> StepExample:
    return StepExample(trajectory_id=i, task_key=f"t{i}", phase=1, index=0, prompt="p", next_prompt="p",
                       completion="c", completion_ids=(), reward=1.0, done=True, mc_return=1.0)


def test_confidence_window_is_open_at_0_5_and_closed_at_0_95() -> None:
    scores = [0.5, 0.5001, 0.95, 0.9501, 0.7, 0.2, 1.0]
    assert replay.keep_confident(scores) == [False, True, True, False, True, False, False]


def test_select_replay_filters_then_caps_at_twice_the_current_steps() -> None:
    candidates = [_ex(i) for i in range(10)]
    scores = [0.7] * 8 + [0.3, 0.99]
    kept = replay.select_replay(candidates, scores, n_current=3, seed=0)
    assert len(kept) == 6
    assert all(e.trajectory_id < 8 for e in kept)
    assert len(replay.select_replay(candidates, scores, n_current=10)) == 8  # fewer kept than the cap
    assert replay.select_replay(candidates, scores, n_current=0) == []
    mixed = replay.build_experience([_ex(100), _ex(101)], kept, seed=0)
    assert sorted(e.trajectory_id for e in mixed) == sorted([100, 101, *[e.trajectory_id for e in kept]])
    with pytest.raises(ValueError):
        replay.select_replay(candidates, scores[:3], n_current=3)


def test_select_replay_keeps_exactly_what_keep_confident_keeps() -> None:
    window = Replay(confidence_low=0.2, confidence_high=0.4, cap_ratio=10)
    scores = [0.1, 0.3, 0.4, 0.5, 0.2]
    kept = replay.select_replay([_ex(i) for i in range(5)], scores, n_current=1, replay=window)
    assert replay.keep_confident(scores, window) == [False, True, True, False, False]
    assert sorted(e.trajectory_id for e in kept) == [1, 2]


def test_score_confidence_is_inverse_perplexity_of_the_action(tiny) -> None:
    from services.trainer.training_loop import LoopConfig, make_accelerator
    from webrl.models.examples import encode_example
    from webrl.models.logprobs import sequence_logprobs

    model, tokenizer = tiny
    examples = [StepExample(trajectory_id=i, task_key="t", phase=1, index=0, prompt=f"Show me {w}",
                            next_prompt="", completion=CLICK, completion_ids=(), reward=1.0, done=True,
                            mc_return=1.0) for i, w in enumerate(["Books", "the Electronics category", "x"])]
    accelerator = make_accelerator(LoopConfig())  # the GPU where there is one, as in a phase
    model.to(accelerator.device)
    scores = replay.score_confidence(accelerator, model, tokenizer, examples, batch_size=2, max_length=None)
    for ex, score in zip(examples, scores, strict=True):
        enc = encode_example(tokenizer, ex.prompt, ex.completion)
        with torch.no_grad():
            d = accelerator.device
            lp, n = sequence_logprobs(model, torch.tensor([enc.input_ids], device=d), torch.ones(1, len(enc), device=d),
                                      torch.tensor([enc.target_mask], device=d))
        assert score == pytest.approx(math.exp(float(lp) / float(n)), rel=1e-4)


def test_bucket_batches_group_similar_lengths_and_cover_every_index() -> None:
    lengths = [5, 100, 7, 98, 6, 99, 8, 97]
    batches = bucket_batches(lengths, 4, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(8))
    assert sorted(sorted(lengths[i] for i in b) for b in batches) == [[5, 6, 7, 8], [97, 98, 99, 100]]
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert padded == 4 * 8 + 4 * 100  # vs 8 * 100 unbucketed
    with pytest.raises(ValueError):
        bucket_batches(lengths, 0)
