"""The critic on a frozen backbone (``critic.train_backbone`` False): each distinct state encoded once, the heads
alone trained on those states, values equal to the whole critic's forward, and a phase that publishes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sqlalchemy import select

from services.trainer.critic_heads import distinct_states, state_features, train_heads
from services.trainer.data import StatePairItem
from services.trainer.phase import run_phase
from services.trainer.training_loop import LoopConfig, make_accelerator
from webrl.db.models import StepValue
from webrl.db.session import session_scope
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.models.critic import CriticModel
from webrl.models.examples import collate_prompts
from webrl.wire.contracts import PhaseJob

CLICK, TYPE, EXIT = 'do(action="Click", element="3")', 'do(action="Type", argument="laptop", element="7")', \
    'exit(message="done")'


def _trajectory(trajectory_id: int, states: list[list[int]], g: float, start: int) -> list[StatePairItem]:
    return [StatePairItem(start + t, states[t], states[t + 1], g, trajectory_id, t) for t in range(len(states) - 1)]


def _items() -> list[StatePairItem]:
    """Two successes and two failures, 3 steps each; their pages differ by a token the heads can read."""
    items: list[StatePairItem] = []
    for k, (mark, g) in enumerate([(30, 1.0), (31, 0.0), (30, 0.9), (31, 0.0)]):
        states = [[20 + k, 21, mark] + [40 + t] * (t + 1) for t in range(4)]
        items += _trajectory(k, states, g, start=len(items))
    return items


def test_distinct_states_names_each_shared_state_once() -> None:
    items = _items()
    rows = distinct_states(items)
    assert len(rows.states) == 4 * 4  # 3 steps: 4 states a trajectory, not 6
    for i, it in enumerate(items):
        assert rows.states[rows.state_row[i]] == it.state and rows.states[rows.next_row[i]] == it.next_state
    assert all(rows.next_row[i] == rows.state_row[i + 1] for i in (0, 1, 3, 4))  # s' of step t is s of step t + 1


def test_heads_train_on_cached_states_and_the_backbone_stays_as_it_was(tiny_dir: Path) -> None:
    critic = CriticModel.from_backbone(tiny_dir, seed=3, dtype=torch.float32, head_init_std=None)
    backbone_before = {k: v.clone() for k, v in critic.backbone.state_dict().items()}
    heads_before = critic.head1[0].weight.clone()
    items = _items()
    config = LoopConfig(lr=3e-3, epochs=60, batch_size=4, seed=0)
    trained = train_heads(make_accelerator(config), critic, items, 0, config)

    assert trained.states == 16 and trained.summary.steps == 60 * 3
    # compared on the CPU: training ran on the accelerator's device (a GPU where there is one)
    assert all(torch.equal(v.cpu(), backbone_before[k]) for k, v in critic.backbone.state_dict().items())
    assert not torch.equal(critic.head1[0].weight.cpu(), heads_before)
    assert trained.summary.last_loss < trained.summary.first_loss
    success = [i for i, it in enumerate(items) if it.mc_return > 0]
    failure = [i for i, it in enumerate(items) if it.mc_return <= 0]
    assert min(trained.v_s[i] for i in success) > max(trained.v_s[i] for i in failure)

    # the cached states give the values the whole critic computes from the tokens (what the critic service serves)
    critic.eval()
    batch = collate_prompts([it.state for it in items], 0)
    device = critic.head1[0].weight.device  # the accelerator's: a GPU's states come from a bf16 autocast forward
    with torch.no_grad():
        direct = critic.values(batch["input_ids"].to(device), batch["attention_mask"].to(device))
    assert trained.v_s == pytest.approx(direct.tolist(), abs=1e-5 if device.type == "cpu" else 2e-3)
    assert trained.v_next[:2] == pytest.approx(trained.v_s[1:3], abs=1e-6)


def test_states_are_encoded_the_same_whatever_the_batch(tiny_dir: Path) -> None:
    critic = CriticModel.from_backbone(tiny_dir, seed=3, dtype=torch.float32)
    states = [[20, 21, 22], [20], [30, 31, 32, 33, 34], [25, 26]]
    one_by_one = state_features(critic, states, 0, batch_size=1)
    together = state_features(critic, states, 0, batch_size=3)
    assert one_by_one.shape == (4, critic.config.hidden_size)
    assert torch.allclose(one_by_one, together, atol=1e-5)


def test_a_phase_with_a_frozen_critic_backbone_publishes_heads_that_reload(tiny_dir: Path, store_trajectory,
                                                                             db) -> None:
    store_trajectory("a", 1, 0, [CLICK, EXIT], reward=1.0)
    store_trajectory("b", 1, 0, [TYPE, TYPE], reward=0.0)
    store_trajectory("c", 1, 0, [CLICK, TYPE, EXIT], reward=1.0)
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 4, "actor.lr": 1e-3, "critic.lr": 1e-3,
                                   "critic.epochs": 20, "critic.train_backbone": False,
                                   "replay.enabled": False})
    result = run_phase(db, PhaseJob(phase=1, actor=str(tiny_dir), hyperparams=hp, max_length=400))
    metrics = result.critic.metrics
    assert metrics["train_backbone"] is False and metrics["steps"] == 20 * 2  # 7 steps in batches of 4
    assert metrics["distinct_states"] <= 7 + 3 and metrics["encode_seconds"] > 0
    critic = CriticModel.from_pretrained(result.critic.path, dtype=torch.float32).eval()
    source = CriticModel.from_backbone(tiny_dir, dtype=torch.float32)
    assert all(torch.equal(v, source.backbone.state_dict()[k]) for k, v in critic.backbone.state_dict().items())
    with session_scope(db) as session:
        values = session.scalars(select(StepValue)).all()
    assert len(values) == 7 and all(0.0 <= v.v_s <= 1.0 for v in values)
    assert result.actor.metrics["critic_seconds"] == metrics["seconds"]
