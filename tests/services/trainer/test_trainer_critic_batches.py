"""The critic's batches: windows of consecutive steps whose shared states are forwarded once, with the same loss
and values as forwarding every s and s' on its own."""

from __future__ import annotations

import pytest
import torch

from services.trainer.data import (
    StatePairItem,
    state_pair_collate,
    trajectory_windows,
    window_sampler,
)
from services.trainer.losses import critic_loss
from services.trainer.phase import critic_loss_fn, state_pair_values
from webrl.models.critic import critic_value
from webrl.models.examples import collate_prompts


def _trajectory(trajectory_id: int, states: list[list[int]], g: float, start: int = 0) -> list[StatePairItem]:
    """Items of one trajectory whose state t is ``states[t]`` (the last item's s' is the final state)."""
    return [StatePairItem(start + t, states[t], states[t + 1], g, trajectory_id, t) for t in range(len(states) - 1)]


def _items() -> list[StatePairItem]:
    a = _trajectory(10, [[5, 6], [5, 6, 7], [5, 6, 7, 8], [9], [9, 9, 9], [4, 4]], 1.0)  # 5 steps
    b = _trajectory(11, [[3], [3, 8], [3, 8, 8]], 0.0, start=5)  # 2 steps
    mixed = [*a, *b]
    return [mixed[i] for i in (6, 0, 3, 5, 1, 4, 2)]  # shuffled, as the experience is


def test_training_batches_mix_trajectories_in_windows_of_consecutive_steps() -> None:
    items = _items()  # trajectory 10: steps 0-4; trajectory 11: steps 0-1
    batches = trajectory_windows(items, 4, window=2, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(len(items)))
    assert [len(b) for b in batches] == [4, 3]
    order = [i for b in batches for i in b]
    windows = [order[k:k + 2] for k in range(0, len(order), 2)]
    pairs = [w for w in windows if len(w) == 2 and len({items[i].trajectory_id for i in w}) == 1]
    for w in pairs:  # a window: consecutive steps, in order
        assert items[w[1]].step == items[w[0]].step + 1
    assert len(pairs) >= 2
    assert any(len({items[i].trajectory_id for i in b}) == 2 for b in batches)  # batches mix trajectories
    assert trajectory_windows(items, 4, seed=0) == batches  # the same seed, the same batches
    assert window_sampler(items, 4, seed=0).make(0) == batches
    assert len(window_sampler(items, 4)) == 2
    with pytest.raises(ValueError):
        trajectory_windows(items, 0)


def test_values_pass_keeps_each_trajectory_together_in_order() -> None:
    items = _items()
    batches = trajectory_windows(items, 4, shuffle=False)
    order = [(items[i].trajectory_id, items[i].step) for b in batches for i in b]
    assert order == [(11, 0), (11, 1), (10, 0), (10, 1), (10, 2), (10, 3), (10, 4)]  # first seen first


def test_collate_forwards_each_shared_state_once() -> None:
    items = [it for it in _items() if it.trajectory_id == 10]
    window = sorted(items, key=lambda it: it.step)[:4]  # 4 consecutive steps: 5 distinct states, not 8
    batch = state_pair_collate(0)(window)
    assert batch["states_input_ids"].shape[0] == 5
    rows = batch["states_input_ids"] * batch["states_attention_mask"]
    for k, it in enumerate(window):
        assert rows[batch["state_row"][k], :len(it.state)].tolist() == it.state
        assert rows[batch["next_row"][k], :len(it.next_state)].tolist() == it.next_state
        assert int(batch["states_attention_mask"][batch["state_row"][k]].sum()) == len(it.state)
    assert batch["index"].tolist() == [it.index for it in window]


def test_deduplicated_loss_and_values_equal_separate_forwards(tiny_dir) -> None:
    from webrl.models.critic import CriticModel

    critic = CriticModel.from_backbone(tiny_dir, seed=3, dtype=torch.float32).eval()
    ids = list(range(20, 40))
    states = [ids[:n] for n in (4, 7, 9, 12, 15)]
    window = _trajectory(0, states, 1.0)  # 4 steps
    window[2] = StatePairItem(2, states[2], states[3], 0.0, 0, 2)  # one step with G = 0: both classes present
    batch = state_pair_collate(0)(window)
    loss, metrics = critic_loss_fn(critic, batch)

    s = collate_prompts([it.state for it in window], 0)
    n = collate_prompts([it.next_state for it in window], 0)
    logits_s = critic(s["input_ids"], s["attention_mask"])
    logits_next = critic(n["input_ids"], n["attention_mask"])
    expected, _ = critic_loss(logits_s, logits_next, batch["mc_return"])
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-5)
    assert metrics["critic_loss"] == pytest.approx(float(expected.detach()), rel=1e-5)

    values = state_pair_values(critic, batch)
    assert values["v_s"].tolist() == pytest.approx(critic_value(logits_s).tolist(), rel=1e-5)
    assert values["v_next"].tolist() == pytest.approx(critic_value(logits_next).tolist(), rel=1e-5)


def test_training_runs_on_its_own_thread_count_then_restores_the_policy_calls(settings) -> None:
    from services.trainer.jobs import training_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # an embedded run's policy calls
        with training_threads(settings.replace(trainer={"threads": 2})):
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
        with pytest.raises(RuntimeError), training_threads(settings.replace(trainer={"threads": 3})):
            raise RuntimeError("a failed job")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
