"""Every formula of DESIGN.md steps 5-6 against numbers computed by hand on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from services.trainer.losses import actor_loss, adaptive_beta, critic_loss, sft_loss
from webrl.hyperparams import ActorLoss
from webrl.models.critic import critic_value
from webrl.returns import advantages, binarise, mc_returns


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
    # mask = [1, 1, 0]; N = 2 + 3 = 5; r_hat = [0.1, 0, 0.04]
    # p_ref = [e^-1.25, e^-1, e^-1.2] -> beta = [1, 1, 5]; caps |A/r_hat| = [10, inf, 15] leave them
    # SmoothL1(x, y) = 0.5 (x-y)^2 if |x-y| < 1 else |x-y| - 0.5
    # SmoothL1(0.1, 1) = 0.5 * 0.81 = 0.405;  SmoothL1(0, 1) = 0.5;  row 3 masked
    assert float(loss.detach()) == pytest.approx((0.405 + 0.5 + 0.0) / 3, rel=1e-6)
    loss.backward()
    # d/dlp_i = SmoothL1'(beta r_hat - A) * beta / N / beta / B; SmoothL1'(d) = d for |d| < 1 else sign(d)
    # row 0: d = -0.9 -> -0.9;  row 1: d = -1 -> -1;  row 2 masked
    assert lp.grad.tolist() == pytest.approx([-0.9 / 5 / 3, -1.0 / 5 / 3, 0.0], rel=1e-5)
    assert metrics["masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["mean_advantage"] == pytest.approx((1 + 1 - 0.6) / 3)
    assert metrics["kl"] == pytest.approx((0.5 / 2 + 0.0 / 3 + 0.2 / 1) / 3)


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
    assert float(loss) == pytest.approx(-(1 * -2 / 5 + 1 * -3 / 5) / 3)


def test_sft_loss_averages_over_target_tokens_only() -> None:
    logp = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -4.0, 0.0, 0.0]])
    target = torch.tensor([[1, 1, 1, 0], [0, 1, 0, 0]])  # position 0 is never a target
    loss, m = sft_loss(logp, target)
    assert float(loss) == pytest.approx((1 + 2 + 4) / 3)
    assert m["target_tokens"] == 3
