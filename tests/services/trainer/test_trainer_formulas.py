"""Every formula of docs/design.md steps 5-6 against numbers computed by hand on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from services.trainer.losses import actor_loss, adaptive_beta, critic_loss, sft_loss
from webrl.method.hyperparams import ActorLoss
from webrl.method.returns import advantages, binarise, mc_returns
from webrl.models.critic import critic_value


def test_mc_returns_discount_with_gamma_0_9() -> None:
    # G_2 = 1; G_1 = 1 + 0.9 * 1 = 1.9; G_0 = 1 + 0.9 * 1.9 = 2.71
    assert mc_returns([1.0, 1.0, 1.0]).tolist() == pytest.approx([2.71, 1.9, 1.0])
    # only the last reward: G_t = 0.9^(2-t)
    assert mc_returns([0.0, 0.0, 1.0]).tolist() == pytest.approx([0.81, 0.9, 1.0])
    assert mc_returns([0.0, 0.0]).tolist() == [0.0, 0.0]
    assert mc_returns([1.0, 1.0], gamma=0.5).tolist() == pytest.approx([1.5, 1.0])


def test_advantage_clamps_and_binarises() -> None:
    v_s, v_next = torch.tensor([0.2, 0.5, 0.3]), torch.tensor([0.6, 0.1, 0.35])
    reward, g = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([1.9, 0.0, 0.0])
    a = advantages(v_s, v_next, reward, g)
    # 0.6-0.2-0.05+1+1.9 = 3.25 -> 1;  0.1-0.5-0.05 = -0.45;  0.35-0.3-0.05 = 0 (exactly at the boundary)
    assert a.tolist() == pytest.approx([1.0, -0.45, 0.0], abs=1e-6)
    assert advantages(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0.0]), torch.tensor([0.0])).item() == -1
    assert binarise(torch.tensor([1.0, -0.45, 0.0, -1e-6])).tolist() == pytest.approx([1.0, -0.6, 1.0, -0.6])


def _ce(logits: list[float], y: int) -> float:
    return -(logits[y] - math.log(sum(math.exp(v) for v in logits)))


def test_critic_loss_is_four_cross_entropies_towards_positive_return() -> None:
    s = torch.tensor([[[0.0, 1.0], [2.0, 0.0]], [[0.5, 0.5], [1.0, -1.0]]])  # (2 heads, B=2, 2)
    nxt = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 2.0], [0.0, 1.0]]])
    g = torch.tensor([0.9, 0.0])  # y = [1, 0]
    loss, metrics = critic_loss(s, nxt, g)
    expected = 0.0
    for logits in (s, nxt):
        for head in range(2):
            expected += (_ce(logits[head, 0].tolist(), 1) + _ce(logits[head, 1].tolist(), 0)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    # V = min over heads of softmax[1]
    p = lambda a, b: math.exp(b) / (math.exp(a) + math.exp(b))  # noqa: E731
    assert critic_value(s).tolist() == pytest.approx([min(p(0, 1), p(0.5, 0.5)), min(p(2, 0), p(1, -1))])
    assert metrics["critic_loss"] == pytest.approx(expected, rel=1e-6)


def test_beta_rule_positive_and_negative_thresholds() -> None:
    a = torch.tensor([1.0, 1.0, 1.0, -0.6, -0.6, -0.6])
    p_ref = torch.tensor([0.8, 0.79, 0.95, 0.89, 0.9, 0.2])
    r_hat = torch.zeros(6)  # |A / 0| = inf: the cap leaves beta alone
    # A>0 & p_ref>=0.8 -> 5; A>0 & p_ref<0.8 -> 1; A<0 & p_ref<0.9 -> 5; A<0 & p_ref>=0.9 -> 1
    assert adaptive_beta(a, p_ref, r_hat).tolist() == [5.0, 1.0, 5.0, 5.0, 1.0, 5.0]


def test_beta_is_capped_by_advantage_over_r_hat_and_detached() -> None:
    a = torch.tensor([1.0, 1.0, -0.6])
    p_ref = torch.tensor([0.9, 0.1, 0.5])  # -> 5, 1, 5 before the cap
    r_hat = torch.tensor([0.4, 0.5, -0.3], requires_grad=True)  # |A/r_hat| = 2.5, 2, 2
    beta = adaptive_beta(a, p_ref, r_hat)
    assert beta.tolist() == pytest.approx([2.5, 1.0, 2.0])
    assert not beta.requires_grad


def test_actor_loss_by_hand() -> None:
    lp = torch.tensor([-2.0, -3.0, -1.0], requires_grad=True)
    lp_ref = torch.tensor([-2.5, -3.0, -1.2])
    n = torch.tensor([2.0, 3.0, 1.0])
    a = torch.tensor([1.0, 1.0, -0.6])
    loss, metrics = actor_loss(lp, lp_ref, n, a)
    # mask = [1, 1, 0]; each step's own N: r_hat = [0.5 / 2, 0 / 3, 0.2 / 1] = [0.25, 0, 0.2]
    # p_ref = [e^-1.25, e^-1, e^-1.2] -> beta = [1, 1, 5]; caps |A/r_hat| = [4, inf, 3] leave them (row 3: 3 < 5 -> 3)
    # SmoothL1(x, y) = 0.5 (x-y)^2 if |x-y| < 1 else |x-y| - 0.5
    # SmoothL1(0.25, 1) = 0.5 * 0.5625 = 0.28125;  SmoothL1(0, 1) = 0.5;  row 3 masked
    assert float(loss.detach()) == pytest.approx((0.28125 + 0.5 + 0.0) / 3, rel=1e-6)
    loss.backward()
    # d/dlp_i = SmoothL1'(beta r_hat - A) * beta / n_i / beta / B; SmoothL1'(d) = d for |d| < 1 else sign(d)
    # row 0: d = -0.75 -> -0.75 / 2;  row 1: d = -1 -> -1 / 3;  row 2 masked
    assert lp.grad.tolist() == pytest.approx([-0.75 / 2 / 3, -1.0 / 3 / 3, 0.0], rel=1e-5)
    assert metrics["masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["mean_advantage"] == pytest.approx((1 + 1 - 0.6) / 3)
    assert metrics["log_ratio_k1"] == pytest.approx((0.5 / 2 + 0.0 / 3) / 2)  # the trained (A > 0) steps only


def _batch_one_losses(lp, lp_ref, n, a, config=ActorLoss()):
    """The published trainer's view: one sequence per batch, the mean of those losses and their gradient."""
    lp = lp.detach().clone().requires_grad_(True)
    losses = [actor_loss(lp[i:i + 1], lp_ref[i:i + 1], n[i:i + 1], a[i:i + 1], config)[0] for i in range(len(a))]
    mean = torch.stack(losses).mean()
    mean.backward()
    return float(mean.detach()), lp.grad.clone()


@pytest.mark.parametrize("config", [ActorLoss(), ActorLoss(kl=False), ActorLoss(objective="squared", beta=0.5)],
                         ids=["smooth-l1", "without-kl", "squared"])
def test_a_batch_of_b_is_the_mean_of_b_batch_one_losses(config) -> None:
    """docs/design.md step 6: the published trainer runs batch 1, so a batch of B must give the mean of B batch-1
    losses and gradients (N summed over the batch shrank r_hat by ~B and the brake never acted)."""
    g = torch.Generator().manual_seed(0)
    n = torch.tensor([7.0, 19.0, 12.0, 25.0, 3.0, 11.0])
    lp_ref = -torch.rand(6, generator=g) * n * 0.2
    lp = (lp_ref + torch.randn(6, generator=g) * 0.3).requires_grad_(True)
    a = torch.tensor([1.0, 1.0, -0.6, 1.0, -0.6, 1.0])
    loss, _ = actor_loss(lp, lp_ref, n, a, config)
    loss.backward()
    expected_loss, expected_grad = _batch_one_losses(lp, lp_ref, n, a, config)
    assert float(loss) == pytest.approx(expected_loss, rel=1e-6)
    assert lp.grad.tolist() == pytest.approx(expected_grad.tolist(), rel=1e-5, abs=1e-8)


def test_the_brake_drives_beta_r_hat_to_a_and_the_gradient_to_zero() -> None:
    """Repeated steps on fixed positives (in a batch of 4): beta * r_hat rises to A and stops there, its gradient
    falls to 0; the per-token log-ratio settles at A / beta, whatever the batch size."""
    n = torch.tensor([10.0, 20.0, 15.0, 30.0])
    lp_ref = torch.log(torch.tensor([0.9, 0.5, 0.95, 0.3])) * n  # p_ref 0.9, 0.5, 0.95, 0.3 -> beta 5, 1, 5, 1
    a = torch.ones(4)
    delta = torch.zeros(4, requires_grad=True)  # per-token log-ratio the update may learn
    optimizer = torch.optim.SGD([delta], lr=0.2)  # small steps: past A / beta the capped beta leaves no gradient
    for _ in range(400):
        optimizer.zero_grad()
        loss, m = actor_loss(lp_ref + delta * n, lp_ref, n, a)
        loss.backward()
        optimizer.step()
    assert delta.detach().tolist() == pytest.approx([1 / 5, 1.0, 1 / 5, 1.0], abs=2e-3)  # A / beta per token
    optimizer.zero_grad()
    loss, m = actor_loss(lp_ref + delta * n, lp_ref, n, a)
    loss.backward()
    assert float(delta.grad.abs().max()) < 1e-3
    assert m["beta_r_hat_mean"] == pytest.approx(1.0, abs=2e-3)
    assert m["braked_fraction"] == pytest.approx(1.0)


def test_squared_objective_by_hand() -> None:
    """The paper's (beta * log(pi / pi_ref) - A)^2 on every step, the action's log-ratio summed."""
    lp = torch.tensor([-2.0, -3.0, -1.0], requires_grad=True)
    lp_ref = torch.tensor([-2.5, -3.0, -1.2])
    n = torch.tensor([2.0, 3.0, 1.0])
    a = torch.tensor([1.0, 1.0, -0.6])
    config = ActorLoss(objective="squared", beta=2.0)
    loss, m = actor_loss(lp, lp_ref, n, a, config)
    # beta * (lp - lp_ref) = [1.0, 0.0, 0.4]; errors [0, -1, 1.0] -> (0 + 1 + 1) / 3
    assert float(loss) == pytest.approx(2.0 / 3)
    loss.backward()
    # d/dlp_i = 2 (x_i - A_i) beta / B
    assert lp.grad.tolist() == pytest.approx([0.0, 2 * -1 * 2 / 3, 2 * 1.0 * 2 / 3], rel=1e-6)
    assert m["masked_fraction"] == 0.0  # every step trains, A < 0 included


def test_actor_loss_high_beta_and_cap() -> None:
    # p_ref = e^(-0.2/2) = 0.905 >= 0.8 with A > 0 -> beta 5
    lp, lp_ref, n, a = torch.tensor([-0.1]), torch.tensor([-0.2]), torch.tensor([2.0]), torch.tensor([1.0])
    loss, m = actor_loss(lp, lp_ref, n, a)
    # r_hat = 0.1 / 2 = 0.05; cap 1/0.05 = 20; SmoothL1(5 * 0.05 = 0.25, 1) = 0.5 * 0.75^2 = 0.28125; / 5
    assert float(loss) == pytest.approx(0.28125 / 5)
    assert m["beta_mean"] == 5.0
    # r_hat = 0.8 / 2 = 0.4 -> cap 2.5 < 5 -> beta r_hat = 1 = A -> zero loss
    loss, m = actor_loss(torch.tensor([0.6]), lp_ref, n, a)
    assert float(loss) == pytest.approx(0.0, abs=1e-7)
    assert m["beta_mean"] == pytest.approx(2.5)


def test_actor_loss_with_no_positive_step_is_zero_and_finite() -> None:
    loss, m = actor_loss(torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -2.0]), torch.tensor([1.0, 2.0]),
                         torch.tensor([-0.6, -0.6]))
    assert float(loss) == 0.0
    assert m["masked_fraction"] == 1.0


def test_actor_loss_without_kl_is_masked_advantage_weighted_likelihood() -> None:
    loss, _ = actor_loss(torch.tensor([-2.0, -3.0, -1.0]), torch.tensor([-2.5, -3.0, -1.2]),
                         torch.tensor([2.0, 3.0, 1.0]), torch.tensor([1.0, 1.0, -0.6]), ActorLoss(kl=False))
    assert float(loss) == pytest.approx(-(1 * -2 / 2 + 1 * -3 / 3) / 3)  # each step over its own n


def test_sft_loss_averages_over_target_tokens_only() -> None:
    logp = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -4.0, 0.0, 0.0]])
    target = torch.tensor([[1, 1, 1, 0], [0, 1, 0, 0]])  # position 0 is never a target
    loss, m = sft_loss(logp, target)
    assert float(loss) == pytest.approx((1 + 2 + 4) / 3)
    assert m["target_tokens"] == 3


def test_the_gate_keeps_the_update_only_with_enough_positives_of_the_phases_own() -> None:
    from services.trainer.actor_update import Gate, gate
    from services.trainer.data import StepExample

    def step(phase: int) -> StepExample:
        return StepExample(trajectory_id=1, task_key="t", phase=phase, index=0, prompt="s", next_prompt="s'",
                           completion="a", completion_ids=(), reward=1.0, done=True, mc_return=1.0)

    a = torch.tensor([1.0, -0.6, 1.0, 1.0, -0.6])
    experience = [step(2), step(2), step(1), step(2), step(2)]  # step 2 is replayed from phase 1
    assert gate(a, [0, 1, 2, 3, 4], experience, 2, ActorLoss()) == Gate([0, 1, 2, 3, 4], 3, 1, False)  # 0: always
    assert gate(a, [0, 2, 3], experience, 2, ActorLoss(min_new_positive_steps=2)) == Gate([0, 2, 3], 3, 1, False)
    assert gate(a, [0, 2, 3], experience, 2, ActorLoss(min_new_positive_steps=3)) == Gate([], 3, 1, True)
    assert gate(a, [2], experience, 2, ActorLoss(min_new_positive_steps=1)) == Gate([], 1, 1, True)  # replay alone
    assert gate(a, [1, 4], experience, 2, ActorLoss(min_new_positive_steps=4)) == Gate([1, 4], 0, 0, False)
    # under the squared objective the A < 0 steps train, so no positive of its own is too few as well
    squared = ActorLoss(objective="squared", min_new_positive_steps=1)
    assert gate(a, [1, 4], experience, 2, squared) == Gate([], 0, 0, True)
    assert gate(a, [0, 1, 4], experience, 2, squared) == Gate([0, 1, 4], 1, 0, False)
    assert gate(a, [1, 4], experience, 2, ActorLoss(objective="squared")) == Gate([1, 4], 0, 0, False)  # 0: always
