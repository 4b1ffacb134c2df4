"""The actor's KL bound (``actor.kl_bound``): the loop stops at the first batch whose window mean is above it, before
that batch's step; one noisy batch inside an epoch's window does not stop it; on a real model the update stops near
the bound instead of running on; the phase record and the run report say where."""

from __future__ import annotations

import pytest
import torch

from services.trainer.actor_update import actor_loop_config, kl_bound_record, update_actor
from services.trainer.data import StepExample
from services.trainer.training_loop import (
    LoopConfig,
    MetricBound,
    TrainSummary,
    make_accelerator,
    prepare,
    train,
)
from webrl.method.hyperparams import ActorLoss, WebRLHyperparams, with_overrides
from webrl.runs.report import kl_bound_note, kl_cell, phase_table

PROMPT = "Show me the products in the Electronics category"
CLICK = 'do(action="Click", element="3")'


class Scalar(torch.nn.Module):
    """One weight w, started at 0; the loss pulls it towards 1 and reports how far it has moved, |w|."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))


def drift_loss(model: Scalar, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
    return (model.w - 1.0) ** 2, {"drift": float(model.w.detach().abs())}


def run_scalar(bound: MetricBound | None) -> tuple[TrainSummary, list[float], float]:
    """Plain SGD-like AdamW steps of lr 0.1 on :class:`Scalar` (each moves w by ~0.1), 3 epochs of 4 batches; the
    drift each applied step measured, and w at the end."""
    config = LoopConfig(lr=0.1, epochs=3, batch_size=1, weight_decay=0.0, gradient_checkpointing=False,
                        stop_above=bound)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, Scalar(), config)
    measured: list[float] = []
    batches = [{"index": torch.tensor([i])} for i in range(4)]
    summary = train(accelerator, prepared, batches, drift_loss, config,
                    on_step=lambda step, metrics: measured.append(metrics["drift"]))
    return summary, measured, float(prepared.model.w.detach())


def test_the_loop_stops_before_the_step_of_the_first_batch_above_the_bound() -> None:
    free, free_drift, free_w = run_scalar(None)
    assert free.steps == 12 and not free.stopped_early and free.stopped_at is None
    bounded, drift, w = run_scalar(MetricBound("drift", 0.45, window=1))
    # every step taken was measured within the bound; the first one measured above it was not taken
    assert all(d <= 0.45 for d in drift)
    assert bounded.stopped_early and bounded.stopped_at is not None
    step, value = bounded.stopped_at
    assert step == bounded.steps + 1 and value > 0.45
    assert value == pytest.approx(abs(w))  # the stopping batch measured the weight the run kept
    assert drift == free_drift[:bounded.steps]  # until then the same run
    assert 0.45 < abs(w) < abs(free_w)
    assert bounded.epochs[-1]["stopped"] == 1.0 and len(bounded.epochs) < 3


def test_a_batch_that_does_not_measure_the_metric_is_within_the_bound() -> None:
    summary, _, _ = run_scalar(MetricBound("not_measured", 0.0))
    assert summary.steps == 12 and summary.stopped_at is None


def spiky_run(bound: MetricBound) -> TrainSummary:
    """Four batches an epoch whose metric is 0.9 on the third and 0 elsewhere: an epoch's mean 0.225."""
    config = LoopConfig(lr=0.1, epochs=2, batch_size=1, gradient_checkpointing=False, stop_above=bound)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, Scalar(), config)
    batches = [{"index": torch.tensor([i]), "spike": torch.tensor([0.9 if i == 2 else 0.0])} for i in range(4)]
    return train(accelerator, prepared, batches,
                 lambda model, batch: ((model.w - 1.0) ** 2, {"spiky": float(batch["spike"][0])}), config)


def test_one_noisy_batch_inside_an_epochs_window_does_not_stop_the_update() -> None:
    assert spiky_run(MetricBound("spiky", 0.5)).stopped_at is None  # the window: one epoch's 4 batches
    one = spiky_run(MetricBound("spiky", 0.5, window=1))
    assert one.stopped_at == (3, pytest.approx(0.9))
    two = spiky_run(MetricBound("spiky", 0.3, window=2))  # (0 + 0.9) / 2 = 0.45 > 0.3 at the third batch
    assert two.stopped_at == (3, pytest.approx(0.45))
    assert spiky_run(MetricBound("spiky", 0.2)).stopped_at == (3, pytest.approx(0.3))  # (0 + 0 + 0.9) / 3


@pytest.fixture
def pushed(tiny):
    """``pushed(kl_bound) -> summary``: an unbounded push of one action (A = 1, no KL term, lr 3e-3, up to 15
    epochs of 2 batches of 2; the bound's window: an epoch's 2 batches) on a fresh copy of the tiny Llama."""
    import copy

    model, tokenizer = tiny
    state = copy.deepcopy(model.state_dict())
    step = StepExample(trajectory_id=1, task_key="t", phase=1, index=0, prompt=PROMPT, next_prompt=PROMPT,
                       completion=CLICK, completion_ids=(), reward=1.0, done=True, mc_return=1.0)

    def run(kl_bound: float | None) -> TrainSummary:
        fresh = copy.deepcopy(model)
        fresh.load_state_dict(state)
        hp = with_overrides(WebRLHyperparams(), {"actor.kl": False, "actor.lr": 3e-3, "actor.epochs": 15,
                                                 "actor.max_grad_norm": 1.0, "actor.warmup_steps": 0,
                                                 "batching.batch_size": 2,
                                                 **({"actor.kl_bound": kl_bound} if kl_bound else {})})
        loop = actor_loop_config(hp, seed=0)
        loop.gradient_checkpointing = False
        accelerator = make_accelerator(loop)
        return update_actor(accelerator, prepare(accelerator, fresh, loop), tokenizer, [step] * 4, [1.0] * 4,
                            hp.actor, loop, max_length=256)

    return run


def test_a_bounded_push_on_a_real_actor_stops_near_the_bound(pushed) -> None:
    free = pushed(None)
    assert free.steps == 30 and free.epochs[-1]["kl_exact"] > 0.5  # unbounded, the push drifts far
    bounded = pushed(0.05)
    assert bounded.stopped_at is not None and bounded.steps < 30
    step, kl = bounded.stopped_at
    assert kl > 0.05 and step == bounded.steps + 1
    assert kl < 0.5 * free.epochs[-1]["kl_exact"]
    record = kl_bound_record(ActorLoss(kl_bound=0.05), bounded)
    assert record == {"kl_bound": 0.05, "kl_stopped_at_step": step, "kl_exact_at_stop": kl}


def test_the_bound_is_off_by_default_and_must_be_positive() -> None:
    assert ActorLoss().kl_bound is None and actor_loop_config(WebRLHyperparams(), 0).stop_above is None
    assert kl_bound_record(ActorLoss(), TrainSummary()) == {}
    assert actor_loop_config(with_overrides(WebRLHyperparams(), {"actor.kl_bound": 0.1}), 0).stop_above == \
        MetricBound("kl_exact", 0.1)
    with pytest.raises(ValueError, match="kl_bound"):
        with_overrides(WebRLHyperparams(), {"actor.kl_bound": 0.0})


def test_the_report_checks_each_phase_against_the_bound() -> None:
    within = {"phase": 1, "train.kl_exact": 0.056, "train.kl_bound": 0.1}
    stopped = {"phase": 2, "train.kl_exact": 0.094, "train.kl_bound": 0.1, "train.kl_stopped_at_step": 19,
               "train.kl_exact_at_stop": 0.1043}
    assert kl_cell(within) == "0.056"
    assert kl_cell(stopped) == "0.094 (stopped before step 19 at 0.1043)"
    assert kl_bound_note([{"phase": 0}, within]).endswith("every phase's update stayed within it.")
    assert "phase 2 reached it" in kl_bound_note([{"phase": 0}, within, stopped])
    assert kl_bound_note([{"phase": 0}, {"phase": 1, "train.kl_exact": 0.2}]) == ""
    header, body = phase_table([{"phase": 2, **stopped}])
    assert body[0][header.index("KL exact")] == "0.094 (stopped before step 19 at 0.1043)"
