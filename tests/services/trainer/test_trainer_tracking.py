"""Training metrics per optimizer step: the loop's step hook, and a whole phase on the tiny model writing its
critic's and actor's curves and the advantages' distribution as TensorBoard event files."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.trainer.actor_update import actor_loss_fn
from services.trainer.phase import phase_version, run_phase
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare, prepared_loader, train
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.runs.tracking import read_stream, tracking_dir
from webrl.wire.contracts import PhaseJob, TrackingSpec

CLICK, TYPE, EXIT = 'do(action="Click", element="3")', 'do(action="Type", argument="laptop", element="7")', \
    'exit(message="done")'


def test_step_hook_gets_each_optimizer_step_with_the_lr_it_used(tiny) -> None:
    from services.trainer.data import SequenceItem, sequence_collate
    from webrl.models.examples import encode_example, pad_id_of

    model, tokenizer = tiny
    items = [SequenceItem(i, encode_example(tokenizer, "Show me Books", action, max_length=64),
                          {"lp_ref": -5.0, "advantage": 1.0 if i % 2 else -0.6})
             for i, action in enumerate([CLICK, TYPE, EXIT, CLICK, TYPE, EXIT, CLICK, TYPE])]
    config = LoopConfig(lr=1e-3, batch_size=2, grad_accum=2, warmup_steps=4)  # 4 micro-batches -> 2 steps
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    loader = prepared_loader(accelerator, items, [len(it.encoded) for it in items],
                             sequence_collate(pad_id_of(tokenizer)), config.batch_size, shuffle=False, seed=0)
    steps: list[tuple[int, dict[str, float]]] = []
    summary = train(accelerator, prepared, loader, actor_loss_fn(DEFAULTS.actor), config,
                    on_step=lambda step, metrics: steps.append((step, metrics)))
    assert [s for s, _ in steps] == [1, 2] and summary.steps == 2
    assert [m["lr"] for _, m in steps] == pytest.approx([1e-3 / 4, 2e-3 / 4])  # warm-up: (step + 1) / 4 x lr
    tokens = sum(len(it.encoded.input_ids) for it in items)
    assert summary.tokens == tokens and summary.tokens_per_second > 0
    for _, m in steps:
        assert {"actor_loss", "log_ratio_k1", "beta_mean", "grad_norm", "tokens_per_s", "samples_per_s"} <= set(m)
        assert m["tokens_per_s"] > 0 and m["grad_norm"] > 0


def test_a_tracked_phase_logs_every_step_and_the_advantages_and_keeps_its_version(tiny_dir: Path, store_trajectory,
                                                                                 db) -> None:
    for key, responses, reward in [("a", [CLICK, EXIT], 1.0), ("b", [TYPE, TYPE], 0.0), ("c", [CLICK, TYPE, EXIT], 1.0),
                                   ("d", [TYPE], 0.0)]:
        store_trajectory(key, 1, 0, responses, reward=reward)
    hp = with_overrides(DEFAULTS, {"batching.batch_size": 2, "actor.lr": 1e-3, "critic.lr": 1e-3,
                                   "actor.epochs": 2})
    job = PhaseJob(phase=1, actor=str(tiny_dir), hyperparams=hp, max_length=400,
                   tracking=TrackingSpec(run="tracked"))
    result = run_phase(db, job)
    assert result.actor.version == phase_version(job.model_copy(update={"tracking": None}))  # logging is no new one
    # what the trainer never reads is no new checkpoint either: a run resumed with more phases, other rollouts or
    # evaluations finds this phase's update; what it trains on is
    later = with_overrides(hp, {"curriculum.phases": 9, "rollout.temperature": 0.3, "evaluation.validation_tasks": 40})
    assert phase_version(job.model_copy(update={"hyperparams": later})) == result.actor.version
    assert run_phase(db, job.model_copy(update={"hyperparams": later})).actor.version == result.actor.version
    other = with_overrides(hp, {"actor.lr": 2e-3})
    assert phase_version(job.model_copy(update={"hyperparams": other})) != result.actor.version

    actor, actor_histograms = read_stream(tracking_dir(db, "tracked") / "phase-1" / "actor")
    steps = result.metrics["steps"]
    assert steps >= 4  # 8 steps of experience, batches of 2, two epochs
    for tag in ("actor/actor_loss", "actor/log_ratio_k1", "actor/kl_exact", "actor/beta_mean", "actor/lr",
                "actor/tokens_per_s",
                "actor/grad_norm", "actor/masked_fraction"):
        assert [step for step, _ in actor[tag]] == list(range(1, steps + 1)), tag
    assert all(value > 0 for _, value in actor["actor/tokens_per_s"])
    assert actor["actor/lr"][0][1] == pytest.approx(1e-3)
    mean_loss = sum(v for _, v in actor["actor/actor_loss"]) / steps
    assert mean_loss == pytest.approx(result.metrics["actor_loss"], rel=1e-4)  # the steps average to the summary
    assert actor_histograms == {"advantage/clamped": [0], "advantage/binarised": [0]}

    critic, critic_histograms = read_stream(tracking_dir(db, "tracked") / "phase-1" / "critic")
    assert {"critic/critic_loss", "critic/critic_accuracy", "critic/lr", "critic/tokens_per_s"} <= set(critic)
    assert list(critic_histograms) == ["critic/value"]

