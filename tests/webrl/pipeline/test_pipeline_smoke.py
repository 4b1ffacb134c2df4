"""`webrl train --preset smoke` end to end in the embedded mode: one phase over about ten tasks with the
tiny model, real Chromium, a real (tiny) ORM, critic and actor training, checkpoints, report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.session import session_scope

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _counts(settings: Settings) -> dict[str, int]:
    with session_scope(settings) as s:
        return {
            "trajectories": s.scalar(select(func.count()).select_from(m.TrajectoryRow)),
            "steps": s.scalar(select(func.count()).select_from(m.StepRow)),
            "labels": s.scalar(select(func.count()).select_from(m.OrmLabel)),
            "generated": s.scalar(select(func.count()).select_from(m.Task).where(m.Task.origin == "generated")),
            "checkpoints": s.scalar(select(func.count()).select_from(m.Checkpoint)),
        }


def _assert_tensorboard_curves(settings: Settings, steps: int) -> None:
    """The run's TensorBoard streams, read back with TensorBoard's event reader: one point per phase of test
    success and the phase's actor loss, and one per optimizer step of the actor's loss and learning rate."""
    from webrl.runs.tracking import read_stream, tracking_dir

    scalars, _ = read_stream(tracking_dir(settings, "smoke") / "pipeline")
    assert [step for step, _ in scalars["evaluate/success"]] == [0, 1]  # the SFT actor, then phase 1's
    assert all(0.0 <= value <= 1.0 for _, value in scalars["evaluate/success"])
    assert {"label/reward_rate", "label/orm_accuracy", "evaluate/success_shopping", "train/critic_loss",
            "train/tokens_per_second", "rollout/seconds"} <= set(scalars)
    actor, histograms = read_stream(tracking_dir(settings, "smoke") / "phase-1" / "actor")
    assert "advantage/binarised" in histograms  # the actor's training signal is logged before any step
    # the actor trains on the steps with A > 0 only; a sampled smoke rollout may have none (then no step ran)
    assert [step for step, _ in actor.get("actor/actor_loss", [])] == list(range(1, steps + 1))
    if steps:
        assert [step for step, _ in scalars["train/actor_loss"]] == [1]
        assert {"actor/lr", "actor/log_ratio_k1", "actor/entropy", "actor/tokens_per_s"} <= set(actor)
        assert {"train/log_ratio_k1", "train/kl_exact", "train/beta_mean", "train/entropy"} <= set(scalars)
    else:
        assert "train/actor_loss" not in scalars


@pytest.fixture
def world(smoke_world: Settings) -> Settings:
    """The settings of the session's smoke run (tests/webrl/conftest.py: ``webrl train --preset smoke --demo-tasks 3
    --screenshots``, then ``webrl eval`` on 2 tasks), with its environment for the commands this test runs."""
    return smoke_world


def test_smoke_run_end_to_end_and_rerun_is_a_no_op(world: Settings, smoke_home: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from webrl.cli import app

    args, output = smoke_home.train_args, smoke_home.train_output
    assert "Loading weights" not in output  # only the command's own bars, not one per checkpoint load
    assert "test overall" in output and "(every column: report.md)" in output  # 80 columns here
    assert "minutes per stage" in output and "min train" in output  # ... and where each phase's time went

    counts = _counts(world)
    assert counts["generated"] > 0  # the curriculum grew from phase 0's failures
    assert counts["labels"] >= 16  # phase 0 seed rollouts + phase 1 rollouts, every one judged
    assert counts["checkpoints"] == 2  # phase 1's actor and critic
    with session_scope(world) as s:
        phases = s.scalars(select(m.Phase).order_by(m.Phase.index)).all()
        assert [(p.index, p.status) for p in phases] == [(0, "done"), (1, "done")]
        assert phases[1].stages_done == ["generate", "filter", "rollout", "label", "train", "validate", "evaluate"]
        metrics = phases[1].metrics
        assert 0.0 <= metrics["evaluate.success"] <= 1.0 and metrics["evaluate.n"] == 8
        assert all(isinstance(p.metrics["evaluate.solved"], list) for p in phases)  # the keys the report lists
        assert Path(phases[-1].state["actor_path"], "model.safetensors").exists()
        parents = {c.role: c.parent_version for c in s.scalars(select(m.Checkpoint))}
        assert parents["actor"]  # lineage recorded
        stored = s.scalar(select(m.Run.options))
        assert stored["hyperparams"]["rollout"]["temperature"] == 0.7  # training rollouts sampled
        # the anchor: the oracle demonstrated 3 train tasks of 3 templates in phase 0, and phase 1's update drew
        # from their steps
        demos = s.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.purpose == "sft")).all()
        assert len(demos) == 3 and all(d.env_score == 1.0 and d.attempt == 1 and d.phase == 0 for d in demos)
        assert len({d.task.config["intent_template_id"] for d in demos}) == 3
        seeds = phases[0].metrics
        assert (seeds["seed-rollout.demonstrations"], seeds["seed-rollout.demonstrations_solved"]) == (3, 3)
        assert metrics["train.demonstration_pool"] == sum(len(d.steps) for d in demos) > 0

    _assert_tensorboard_curves(world, steps=phases[1].metrics["train.steps"])

    report = world.artifacts_dir / "reports" / "smoke"
    lines = (report / "report.md").read_text().splitlines()
    phase_table = lines[lines.index("## Phases"):lines.index("## Success by template group")]
    assert [line.split(" | ")[0] for line in phase_table if line.startswith(("| 0 |", "| 1 |"))] == ["| 0", "| 1"]
    assert (report / "success_per_phase.png").stat().st_size > 1000
    assert "## Test tasks solved per phase" in lines

    from rich.console import Console

    from webrl.commands import train

    wide = Console(width=320, record=True)  # a terminal wide enough for the whole table gets every column
    monkeypatch.setattr(train, "console", wide)
    train.print_phase_table(world, "smoke")
    assert "test shopping_admin" in wide.export_text() and "every column: report.md" not in wide.export_text()

    again = CliRunner().invoke(app, args)  # everything is done: resumes to the end without new work
    assert again.exit_code == 0, again.output
    assert _counts(world) == counts

    _evaluate_phase_one_in_full_later(world)


def _evaluate_phase_one_in_full_later(world: Settings) -> None:
    """`webrl eval --run smoke --phase 1 --stratified 4`, then `--limit 10`: phase 1's actor on the run's stratified
    4 test tasks, then on the first 10 (its own 8 episodes reused), each becoming phase 1's evaluation in the table
    and report; again, it is a no-op. Then the refusals, one line naming the option."""
    from webrl.cli import app

    def phase_one() -> dict:
        with session_scope(world) as s:
            return s.scalar(select(m.Phase.metrics).where(m.Phase.index == 1))

    before = phase_one()
    sample = CliRunner().invoke(app, ["eval", "--run", "smoke", "--phase", "1", "--stratified", "4"])
    assert sample.exit_code == 0, sample.output + repr(sample.exception)
    sampled = phase_one()
    assert (sampled["evaluate.n"], sampled["evaluate.subset"], len(set(sampled["evaluate.keys"]))) == (4, True, 4)
    with session_scope(world) as s:  # one task of each of 4 templates: the run's stratified sampler
        templates = {t.config["intent_template_id"] for t in s.scalars(
            select(m.Task).where(m.Task.key.in_(sampled["evaluate.keys"])))}
    assert len(templates) == 4
    assert "test subset" in (world.artifacts_dir / "reports" / "smoke" / "report.md").read_text()

    args = ["eval", "--run", "smoke", "--phase", "1", "--limit", "10"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "run smoke phase 1:" in result.output and "of 10 test tasks" in result.output
    after = phase_one()
    assert after["evaluate.n"] == 10 and after["evaluate.later"] is True and after["evaluate.subset"] is False
    assert set(before["evaluate.solved"]) <= set(after["evaluate.solved"])  # greedy: its 8 episodes are reused
    assert after["evaluate.seconds"] == before["evaluate.seconds"]  # the phase's minutes stay the run's own
    assert {k: v for k, v in after.items() if not k.startswith("evaluate.")} == \
        {k: v for k, v in before.items() if not k.startswith("evaluate.")}
    with session_scope(world) as s:  # the phase's own 8 episodes reused: one episode per task evaluated
        first_ten = [t.key for t in s.scalars(select(m.Task).where(m.Task.split == "test").order_by(m.Task.id))][:10]
        evaluated = list(s.scalars(select(m.Task.key).join(m.TrajectoryRow).where(
            m.TrajectoryRow.phase == 1, m.TrajectoryRow.purpose == "eval")))
    assert sorted(evaluated) == sorted(set(first_ten) | set(sampled["evaluate.keys"]))
    assert after["evaluate.keys"] == first_ten
    stored = _counts(world)["trajectories"]
    report = (world.artifacts_dir / "reports" / "smoke" / "report.md").read_text()
    assert "evaluated after the run (`webrl eval --run`): phase 1" in report
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and _counts(world)["trajectories"] == stored

    for bad, hint, words in ((["--run", "nope"], "--run", "no run named 'nope'; the runs stored here: smoke"),
                             (["--run", "smoke", "--phase", "4"], "--phase", "has phases 0-1"),
                             (["--run", "smoke", "--max-steps", "3"], "--max-steps", "leave out --max-steps"),
                             ([], "--actor", "name the actor folder to evaluate, or --run"),
                             (["--actor", ".", "--stratified", "4"], "--stratified", "--stratified applies to --run")):
        refused = CliRunner().invoke(app, ["eval", *bad])
        assert refused.exit_code == 2 and hint in refused.output and words in " ".join(refused.output.split()), \
            refused.output
