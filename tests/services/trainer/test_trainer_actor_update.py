"""The actor's update measured: which steps it trains on, the exact KL against a by-hand computation, the flips probe,
and the brake acting on a real model."""

from __future__ import annotations

import pytest
import torch

from services.trainer.actor_update import (
    actor_loss_fn,
    anchor_items,
    exact_kl,
    positives_from_failed,
    positives_in_confidence_band,
    reference_pass,
    trained_steps,
    update_actor,
    with_anchors,
)
from services.trainer.data import SequenceItem, StepExample, sequence_collate
from services.trainer.replay import score_confidence
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare, prepared_loader, train
from webrl.method.hyperparams import ActorLoss
from webrl.models.examples import encode_example, pad_id_of
from webrl.models.probe import ProbeStep, encode_probe, flips, load_probe, probe_matches, save_probe

PROMPT = "Show me the products in the Electronics category"
CLICK = 'do(action="Click", element="3")'


def _step(reward: float) -> StepExample:
    return StepExample(trajectory_id=1, task_key="t", phase=1, index=0, prompt=PROMPT, next_prompt=PROMPT,
                       completion=CLICK, completion_ids=(), reward=reward, done=True, mc_return=reward)


def test_trained_steps_keep_drop_or_trust_the_critic_on_failed_positives() -> None:
    experience = [_step(1.0), _step(0.0), _step(0.0), _step(0.0), _step(1.0)]
    a = torch.tensor([1.0, 1.0, 1.0, -0.6, -0.6])
    clamped = torch.tensor([0.9, 0.1, 0.5, -0.4, -0.2])
    assert trained_steps(a, clamped, experience, ActorLoss()) == [0, 1, 2]  # published: every A > 0
    assert trained_steps(a, clamped, experience, ActorLoss(failed_positives="drop")) == [0]
    assert trained_steps(a, clamped, experience, ActorLoss(failed_positives="confident", failed_margin=0.3)) == [0, 2]
    # the paper's objective trains on every step; the filter still applies to reward-0 positives
    assert trained_steps(a, clamped, experience, ActorLoss(objective="squared", failed_positives="drop")) == [0, 3, 4]
    assert positives_from_failed(a, experience, [0, 1, 2]) == pytest.approx(2 / 3)
    assert positives_from_failed(a, experience, [3, 4]) == 0.0


def test_positives_outside_the_start_actors_confidence_band_are_left_out(tiny) -> None:
    """``actor.min/max_positive_confidence``: the A > 0 steps a real actor takes with c = exp(lp / n) outside (min,
    max] leave the update, the others and every A < 0 step stay; with the band (0, 1] nothing is scored."""
    model, tokenizer = tiny
    completions = [CLICK, 'do(action="Type", argument="laptop", element="7")', 'exit(message="done")', CLICK]
    experience = [StepExample(trajectory_id=1, task_key="t", phase=1, index=i, prompt=PROMPT, next_prompt=PROMPT,
                              completion=c, completion_ids=(), reward=1.0, done=False, mc_return=1.0)
                  for i, c in enumerate(completions)]
    accelerator = make_accelerator(LoopConfig(lr=1e-4, epochs=1, batch_size=2, gradient_checkpointing=False))
    scores = score_confidence(accelerator, model, tokenizer, experience, batch_size=2, max_length=None)
    a = torch.tensor([1.0, 1.0, 1.0, -0.6])
    ranked = sorted(range(3), key=lambda i: scores[i])  # the three positives, least confident first
    assert scores[ranked[0]] < scores[ranked[1]] < scores[ranked[2]]

    def kept(**band: float) -> tuple[list[int], int]:
        return positives_in_confidence_band(accelerator, model, tokenizer, experience, a, [0, 1, 2, 3],
                                            ActorLoss(**band), batch_size=2, max_length=None)

    above = kept(max_positive_confidence=scores[ranked[1]])  # the middle one's c is inside (c <= max)
    assert above == ([i for i in range(4) if i != ranked[2]], 1)  # order kept; the A < 0 step stays
    below = kept(min_positive_confidence=scores[ranked[1]])  # ... and outside (c <= min)
    assert below == ([i for i in range(4) if i not in ranked[:2]], 2)
    everything = positives_in_confidence_band(accelerator, None, tokenizer, experience, a, [0, 1, 2, 3], ActorLoss(),
                                              batch_size=2, max_length=None)  # (0, 1]: no model needed
    assert everything == ([0, 1, 2, 3], 0)
    with pytest.raises(ValueError, match="min_positive_confidence"):
        ActorLoss(min_positive_confidence=0.9, max_positive_confidence=0.5)


def test_exact_kl_by_hand() -> None:
    p_ref = torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]])
    p = torch.tensor([[0.25, 0.5, 0.25], [0.1, 0.8, 0.1]])
    kl = exact_kl(p_ref.log(), p.log())
    # row 0: 0.5 ln 2 + 0.25 ln 0.5 + 0 = 0.25 ln 2; row 1: identical distributions
    assert kl.tolist() == pytest.approx([0.25 * torch.log(torch.tensor(2.0)).item(), 0.0], abs=1e-6)


def _items(tokenizer, pairs, scalars=None) -> list[SequenceItem]:
    return [SequenceItem(i, encode_example(tokenizer, p, c), (scalars or [{}] * len(pairs))[i])
            for i, (p, c) in enumerate(pairs)]


def test_the_training_forward_measures_the_exact_kl_against_the_reference_pass(tiny) -> None:
    """kl_exact from the loss function equals the KL computed by hand from two full forwards, before and after an
    update, and is 0 before the first step."""
    model, tokenizer = tiny
    pairs = [(PROMPT, CLICK), ("Search for a laptop", 'do(action="Type", argument="laptop", element="7")')]
    items = _items(tokenizer, pairs)
    reference = reference_pass(model, items, pad_id_of(tokenizer), 2, torch.device("cpu"))
    assert set(reference.distributions) == {0, 1}
    assert reference.distributions[0].shape == (items[0].encoded.n_target, model.config.vocab_size)
    scored = [SequenceItem(it.index, it.encoded, {"lp_ref": reference.lp[it.index], "advantage": 1.0})
              for it in items]
    batch = sequence_collate(pad_id_of(tokenizer))(scored)
    fn = actor_loss_fn(ActorLoss(), reference.distributions)
    _, before = fn(model, batch)
    assert before["kl_exact"] == pytest.approx(0.0, abs=1e-3)  # fp16-stored reference against itself
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    _, after = fn(model, batch)
    with torch.no_grad():  # by hand: full logits, the positions that predict each target token
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        target = batch["target_mask"].bool().clone()
        target[:, 0] = False
        rows = []
        for b in range(2):
            positions = target[b].nonzero().flatten() - 1
            current = torch.log_softmax(logits[b, positions], -1)
            rows.append(exact_kl(reference.distributions[b], current))
        by_hand = float(torch.cat(rows).mean())
    assert after["kl_exact"] > 1e-3
    assert after["kl_exact"] == pytest.approx(by_hand, rel=2e-3)


def test_flips_count_the_probe_steps_whose_greedy_action_changed(tiny, tmp_path) -> None:
    """A probe built from what the model itself picks greedily has no flips; a step whose action is changed on
    purpose flips (its site's share is 1/2, the other site's 0)."""
    model, tokenizer = tiny
    prompts = [PROMPT, "Search for a laptop", "Show me Books", "Show me the Electronics"]
    greedy = []
    for prompt in prompts:  # the tiny model's own greedy continuation of 6 tokens (then end-of-turn)
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        out = model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=pad_id_of(tokenizer))
        greedy.append(out[0, ids.shape[1]:].tolist())
    steps = []
    for i, (prompt, ids) in enumerate(zip(prompts, greedy, strict=True)):
        text = tokenizer.decode(ids)
        steps.append(ProbeStep(task_key=f"t{i}", site="shopping" if i < 2 else "reddit", index=0, prompt=prompt,
                               completion=text))
    path = save_probe(steps, tmp_path / "probe.jsonl.gz")
    assert load_probe(path) == steps
    encoded = encode_probe(tokenizer, steps)
    for e, ids in zip(encoded, greedy, strict=True):  # force the exact greedy ids (decode/encode may re-split)
        e.input_ids[-len(ids) - 1:-1] = ids
    # the end-of-turn target after 6 greedy tokens need not be the model's choice: judge the 6 tokens only
    for e in encoded:
        e.target_mask[-1] = 0
    assert probe_matches(model, tokenizer, encoded) == [True] * 4
    changed = encoded[1]
    changed.input_ids[-2] = (changed.input_ids[-2] + 1) % model.config.vocab_size  # another action on purpose
    matches = probe_matches(model, tokenizer, encoded)
    assert matches == [True, False, True, True]
    result = flips(steps, matches)
    assert result == {"flips": 0.25, "probe_steps": 4.0, "flips_reddit": 0.0, "flips_shopping": 0.5}


def test_probe_file_errors_name_the_line(tmp_path) -> None:
    import gzip

    path = tmp_path / "bad.jsonl.gz"
    with gzip.open(path, "wt") as out:
        out.write('{"task_key": "a", "site": "s", "index": 0, "prompt": "p", "completion": "c"}\n{"oops": 1}\n')
    with pytest.raises(ValueError, match="line 2"):
        load_probe(path)


def test_the_brake_stops_a_real_actor_at_a_over_beta(tiny) -> None:
    """A real model, a fixed positive in a batch of 4, many Adam steps: beta * r_hat climbs to A = 1 and the
    gradient vanishes there (the published objective, per-sequence N); without the KL term the same steps keep
    pushing the action's log-ratio past it."""
    def run(config: ActorLoss) -> tuple[float, float, list[float]]:
        model, tokenizer = tiny_copy()
        pairs = [(PROMPT, CLICK)] * 4
        items = _items(tokenizer, pairs)
        reference = reference_pass(model, items, pad_id_of(tokenizer), 4, torch.device("cpu"))
        scored = [SequenceItem(it.index, it.encoded, {"lp_ref": reference.lp[it.index], "advantage": 1.0})
                  for it in items]
        loop = LoopConfig(lr=3e-3, epochs=60, batch_size=4, gradient_checkpointing=False)
        accelerator = make_accelerator(loop)
        prepared = prepare(accelerator, model, loop)
        loader = prepared_loader(accelerator, scored, [len(it.encoded) for it in scored],
                                 sequence_collate(pad_id_of(tokenizer)), 4, shuffle=False, seed=0)
        norms: list[float] = []
        summary = train(accelerator, prepared, loader, actor_loss_fn(config), loop,
                        on_step=lambda step, m: norms.append(m["grad_norm"]))
        last = summary.epochs[-1]
        return last.get("beta_r_hat_mean", 0.0), last["log_ratio_k1"], norms

    tiny_copy = _fresh(tiny)
    braked, ratio, norms = run(ActorLoss())
    assert braked == pytest.approx(1.0, abs=0.05)
    assert norms[-1] < 0.05 * max(norms)
    _, free_ratio, _ = run(ActorLoss(kl=False))
    assert free_ratio > ratio + 0.05


def _fresh(tiny):
    """A factory of fresh copies of the tiny model (each run starts from the same weights)."""
    import copy

    model, tokenizer = tiny
    state = copy.deepcopy(model.state_dict())

    def make():
        fresh = copy.deepcopy(model)
        fresh.load_state_dict(state)
        return fresh, tokenizer

    return make


ANCHORS = [ProbeStep("train/1", "shopping", 0, "Search for a laptop",
                     'do(action="Type", argument="laptop", element="7")'),
           ProbeStep("train/2", "reddit", 0, "Show me Books", 'do(action="Click", element="5")'),
           ProbeStep("train/3", "gitlab", 1, "Show me the Electronics", 'do(action="Scroll Down")')]


def test_every_batch_gets_its_anchors_drawn_in_turn(tiny) -> None:
    """Each batch keeps its own rows first and gains ``per_batch`` anchor rows; every anchor is drawn once before
    any is drawn again."""
    _, tokenizer = tiny
    held = anchor_items(tokenizer, ANCHORS, 10, first_index=5, seed=0, max_length=None)
    assert sorted(it.index for it in held) == [5, 6, 7]  # all three: fewer than asked
    assert all(it.scalars["anchor"] == 1.0 for it in held)
    trained = [SequenceItem(0, encode_example(tokenizer, PROMPT, CLICK), {"lp_ref": 0.0, "advantage": 1.0,
                                                                         "anchor": 0.0})]
    collate = with_anchors(sequence_collate(pad_id_of(tokenizer)), held, 2, seed=0)
    drawn = []
    for _ in range(3):
        batch = collate(trained)
        assert batch["index"][0] == 0 and batch["anchor"].tolist() == [0.0, 1.0, 1.0]
        drawn += batch["index"][1:].tolist()
    assert sorted(drawn[:3]) == [5, 6, 7] and sorted(drawn[3:]) == [5, 6, 7]


def test_the_anchor_holds_the_policy_on_its_steps_while_the_trained_action_rises(tiny) -> None:
    """The same unbounded push on one action, with and without the anchor: the pushed action's log-ratio rises in
    both, and the exact KL at the anchor steps (never trained on) stays a fraction of the unanchored update's."""
    def run(anchor_kl: float) -> tuple[float, float, dict]:
        model, tokenizer = tiny_copy()
        probe_items = [SequenceItem(i, encode_example(tokenizer, s.prompt, s.completion), {})
                       for i, s in enumerate(ANCHORS)]
        before = reference_pass(model, probe_items, pad_id_of(tokenizer), 4, torch.device("cpu"))
        loop = LoopConfig(lr=3e-3, epochs=15, batch_size=2, gradient_checkpointing=False)
        accelerator = make_accelerator(loop)
        prepared = prepare(accelerator, model, loop)
        summary = update_actor(accelerator, prepared, tokenizer, [_step(1.0)] * 4, [1.0] * 4,
                               ActorLoss(kl=False, anchor_kl=anchor_kl), loop, max_length=256,
                               anchors=ANCHORS if anchor_kl else None)
        scored = [SequenceItem(it.index, it.encoded, {"lp_ref": before.lp[it.index], "advantage": 1.0})
                  for it in probe_items]
        _, after = actor_loss_fn(ActorLoss(), before.distributions)(prepared.model,
                                                                    sequence_collate(pad_id_of(tokenizer))(scored))
        return after["kl_exact"], summary.epochs[-1]["log_ratio_k1"], summary.epochs[-1]

    tiny_copy = _fresh(tiny)
    free_kl, free_push, _ = run(0.0)
    held_kl, held_push, last = run(30.0)
    assert free_push > 0.5 and held_push > 0.5  # the trained action rose either way
    assert free_kl > 0.05
    assert held_kl < 0.3 * free_kl, (held_kl, free_kl)
    assert "anchor_kl" in last


def test_an_anchor_without_anchor_steps_is_refused(tiny) -> None:
    model, tokenizer = tiny
    loop = LoopConfig(lr=1e-3, epochs=1, batch_size=2, gradient_checkpointing=False)
    accelerator = make_accelerator(loop)
    with pytest.raises(ValueError, match="anchor"):
        update_actor(accelerator, prepare(accelerator, model, loop), tokenizer, [_step(1.0)], [1.0],
                     ActorLoss(anchor_kl=1.0), loop, max_length=256)
