"""The WebRL hyperparameter record: the paper's defaults, typed presets, unknown keys refused, and the CLI's flags
travelling to the trainer's phase job."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from webrl.config import Settings
from webrl.db.migrate import upgrade
from webrl.method.hyperparams import (
    DEFAULTS,
    MAX_EPISODE_STEPS,
    ActorLoss,
    WebRLHyperparams,
    check_band,
    parse_hyperparams,
    with_overrides,
)
from webrl.method.presets import PRESETS
from webrl.models.probe import ProbeStep, save_probe
from webrl.wire.contracts import FilterRequest, PhaseJob, RolloutRequest, TrackingSpec


def test_defaults_are_the_papers_and_the_published_codes_values() -> None:
    d = DEFAULTS
    assert (d.curriculum.value_low, d.curriculum.value_high) == (0.05, 0.75)  # paper section 3.2
    assert d.reward.orm_threshold == 0.5  # paper section 3.1
    assert (d.replay.confidence_low, d.replay.confidence_high, d.replay.cap_ratio) == (0.5, 0.95, 2)
    assert (d.advantage.gamma, d.advantage.step_penalty, d.advantage.clip) == (0.9, 0.05, 1.0)
    assert (d.advantage.positive, d.advantage.negative) == (1.0, -0.6)
    assert (d.actor.beta, d.actor.beta_high, d.actor.p_ref_positive, d.actor.p_ref_negative) == (1.0, 5.0, 0.8, 0.9)
    assert d.actor.kl and d.replay.enabled and d.curriculum.enabled
    assert (d.actor.lr, d.critic.lr, d.actor.epochs, d.critic.epochs) == (1e-6, 1e-6, 1, 1)  # published config
    assert (d.rollout.max_steps, d.rollout.max_parse_failures, d.rollout.max_repeated_actions) == (30, 5, 5)
    assert d.evaluation.tasks == 165  # WebArena-Lite's test set
    paper = PRESETS["paper"]
    assert (paper.curriculum.phases, paper.curriculum.tasks_per_phase) == (8, 500)
    assert (paper.actor.lr, paper.actor.max_grad_norm) == (1e-6, 0.01)  # published config: lm_lr, max_grad_norm
    assert paper.rollout.temperature is None  # greedy rollouts unless --rollout-temperature (docs/running.md)


def test_every_field_has_a_docstring_that_names_its_source() -> None:
    import ast
    import inspect

    import webrl.method.hyperparams as module

    tree = ast.parse(inspect.getsource(module))
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name != "WebRLHyperparams"):
        body = cls.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                doc = body[i + 1] if i + 1 < len(body) else None
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), (cls.name, node.target.id)


def test_presets_are_records_and_round_trip_through_json() -> None:
    for name, preset in PRESETS.items():
        assert isinstance(preset, WebRLHyperparams), name
        assert parse_hyperparams(json.loads(json.dumps(dataclasses.asdict(preset)))) == preset


def test_the_longer_cpu_schedule_changes_only_the_run_scale_of_cpu_demo() -> None:
    demo, long = dataclasses.asdict(PRESETS["cpu-demo"]), dataclasses.asdict(PRESETS["cpu-long"])
    changed = {f"{group}.{name}" for group in demo for name in demo[group] if demo[group][name] != long[group][name]}
    assert changed == {"curriculum.phases", "curriculum.tasks_per_phase", "curriculum.candidates_per_phase",
                       "curriculum.seed_tasks", "evaluation.subset"}
    assert PRESETS["cpu-long"].evaluation.validation_tasks == 40


def test_a_misspelt_key_is_an_error_that_names_it() -> None:
    with pytest.raises(TypeError, match="betta"):
        ActorLoss(betta=2.0)  # a preset is Python: it fails when webrl.method.presets is imported
    with pytest.raises(ValidationError, match=r"actor\.betta"):
        parse_hyperparams({"actor": {"betta": 2.0}})
    with pytest.raises(ValueError, match=r"unknown hyperparameter 'actor\.betta'; known: .*actor\.beta,"):
        with_overrides(DEFAULTS, {"actor.betta": 2.0})
    with pytest.raises(ValidationError, match="actor_lr"):  # the trainer's job: no key is silently dropped
        PhaseJob.model_validate({"phase": 1, "actor": "/a", "actor_lr": 1e-3})
    with pytest.raises(ValidationError, match=r"hyperparams\.replay\.cap"):
        PhaseJob.model_validate({"phase": 1, "actor": "/a", "hyperparams": {"replay": {"cap": 3}}})


def test_values_out_of_range_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"value_low 0\.9 exceeds value_high 0\.75"):
        with_overrides(DEFAULTS, {"curriculum.value_low": 0.9})
    with pytest.raises(ValidationError, match=r"actor\.beta"):
        with_overrides(DEFAULTS, {"actor.beta": 0.0})
    with pytest.raises(ValidationError, match=r"candidates_per_phase 48 is below tasks_per_phase 96"):
        with_overrides(PRESETS["cpu-demo"], {"curriculum.tasks_per_phase": 96})
    kept_all = with_overrides(PRESETS["cpu-demo"], {"curriculum.tasks_per_phase": 48,
                                                    "curriculum.candidates_per_phase": 48})
    assert (kept_all.curriculum.tasks_per_phase, kept_all.curriculum.candidates_per_phase) == (48, 48)


def test_the_one_band_check_refuses_low_above_high_and_ends_outside_zero_one() -> None:
    check_band(0.05, 0.75)
    check_band(0.3, 0.3)  # a band of one value is allowed
    with pytest.raises(ValueError, match=r"low 0\.8 exceeds high 0\.2 \(need 0 <= low <= high <= 1\)"):
        check_band(0.8, 0.2)
    with pytest.raises(ValueError, match=r"need 0 <= low <= high <= 1, got \[-0\.1, 0\.5\]"):
        check_band(-0.1, 0.5)
    with pytest.raises(ValueError, match=r"got \[0\.5, 1\.5\]"):
        check_band(0.5, 1.5)
    with pytest.raises(ValidationError, match=r"low 0\.8 exceeds high 0\.2"):  # the filter job's record says the same
        FilterRequest(task_keys=["t"], values={"t": 0.5}, critic_version="c", low=0.8, high=0.2)


def test_the_horizon_is_bounded_by_the_one_episode_cap() -> None:
    assert with_overrides(DEFAULTS, {"rollout.max_steps": MAX_EPISODE_STEPS}).rollout.max_steps == MAX_EPISODE_STEPS
    too_long = rf"max_steps\n +Input should be less than or equal to {MAX_EPISODE_STEPS}"
    with pytest.raises(ValidationError, match=too_long):
        with_overrides(DEFAULTS, {"rollout.max_steps": MAX_EPISODE_STEPS + 1})
    with pytest.raises(ValidationError, match=too_long):  # the rollout job takes the run's horizon under the same cap
        RolloutRequest.model_validate({"max_steps": MAX_EPISODE_STEPS + 1})


def test_cli_flags_reach_the_trainers_phase_job(settings: Settings, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from webrl.cli import app
    from webrl.commands import train as train_command
    from webrl.orchestration.pipeline import Pipeline

    upgrade(settings)
    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    probe = save_probe([ProbeStep("train/1", "shopping", 0, "a page", 'do(action="Scroll Down")')],
                       settings.artifacts_dir / "probe.jsonl.gz")
    jobs: list[PhaseJob] = []
    monkeypatch.setattr(train_command, "ensure_ready", lambda s: None)
    monkeypatch.setattr(train_command, "sandbox_if_needed", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(train_command, "print_phase_table", lambda s, run: None)
    monkeypatch.setattr("webrl.runs.report.write_report", lambda s, run, out: out)
    monkeypatch.setattr(Pipeline, "run", lambda self: jobs.append(self.phase_job(1)))
    result = CliRunner().invoke(app, [
        "train", "--preset", "smoke", "--actor", str(actor), "--beta", "2", "--value-low", "0.1",
        "--value-high", "0.6", "--replay-cap", "3", "--rollout-temperature", "0.3", "--max-steps", "12", "--no-kl",
        "--critic-heads-only", "--critic-start", "base", "--eval-tasks", "20", "--actor-lr", "3e-5",
        "--actor-epochs", "2", "--objective", "squared", "--failed-positives", "confident", "--probe", str(probe),
        "--solved-share", "0.25", "--min-positive-confidence", "0.5",
        "--max-positive-confidence", "0.95", "--anchor-kl", "3", "--anchors", str(probe), "--intent-contrast", "2",
        "--renumbered-positives", "2", "--keep-activations", "--tasks-per-phase", "48", "--candidates-per-phase", "96",
        "--validation-tasks", "40", "--validation-margin", "2", "--filter-judge", "templates",
    ])
    assert result.exit_code == 0, result.output
    received = PhaseJob.model_validate(json.loads(jobs[0].model_dump_json()))  # as the Celery task receives it
    assert received.tracking == TrackingSpec(run="default", log_with="tensorboard")  # the trainer logs to the run
    hp = received.hyperparams
    assert (hp.actor.beta, hp.actor.kl, hp.replay.cap_ratio) == (2.0, False, 3)
    assert (hp.curriculum.value_low, hp.curriculum.value_high) == (0.1, 0.6)
    assert (hp.rollout.temperature, hp.rollout.max_steps) == (0.3, 12)
    assert hp.critic.train_backbone is False and hp.critic.backbone_start == "base"
    assert (hp.evaluation.tasks, hp.actor.lr, hp.actor.epochs) == (20, 3e-5, 2)
    assert (hp.actor.objective, hp.actor.failed_positives) == ("squared", "confident")
    assert (hp.actor.min_positive_confidence, hp.actor.max_positive_confidence) == (0.5, 0.95)
    assert hp.curriculum.solved_share == 0.25 and hp.curriculum.enabled is True  # a flag left out: the preset's
    assert hp.curriculum.filter_judge == "templates"
    assert received.probe == str(probe.resolve())
    assert (hp.actor.anchor_kl, received.anchors) == (3.0, str(probe.resolve()))
    assert (hp.actor.intent_contrast, hp.actor.renumbered_positives) == (2.0, 2)
    assert (hp.curriculum.tasks_per_phase, hp.curriculum.candidates_per_phase) == (48, 96)
    assert (hp.evaluation.validation_tasks, hp.evaluation.validation_margin) == (40, 2)
    assert hp.batching.gradient_checkpointing is False and PRESETS["smoke"].batching.gradient_checkpointing
    smoke = PRESETS["smoke"]
    assert (hp.critic.epochs, hp.batching.batch_size, hp.curriculum.phases) == (
        smoke.critic.epochs, smoke.batching.batch_size, smoke.curriculum.phases)  # what no flag names: the preset's


def test_train_help_shows_the_knobs_a_researcher_tunes() -> None:
    from webrl.cli import app

    result = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    for flag in ("--beta", "--value-low", "--value-high", "--replay-cap", "--rollout-temperature", "--max-steps",
                 "--critic-heads-only", "--eval-tasks", "--actor-lr", "--actor-epochs", "--objective",
                 "--failed-positives", "--min-positive-confidence", "--max-positive-confidence", "--probe",
                 "--anchor-kl", "--anchors", "--intent-contrast", "--renumbered-positives",
                 "--keep-activations", "--tasks-per-phase", "--candidates-per-phase", "--validation-margin",
                 "--filter-judge"):
        assert flag in result.output, flag


def test_a_value_the_record_refuses_names_its_field(tmp_path: Path) -> None:
    from webrl.cli import app

    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--actor-lr", "0"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "actor.lr: Input should be greater than 0" in result.output, result.output
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--kl-bound", "0"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "actor.kl_bound: Input should be greater than 0" in result.output, result.output
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--critic-start", "sft"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "critic.backbone_start: Input should be 'actor' or 'base'" in result.output, result.output
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--rollout-temperature", "3"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--rollout-temperature" in result.output and "less than or equal to 2" in (
        result.output)
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--filter-judge", "orm"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "curriculum.filter_judge: Input should be 'critic' or 'templates'" in result.output, result.output


def test_an_anchor_without_its_steps_is_refused_naming_the_flag(settings: Settings, tmp_path: Path) -> None:
    from webrl.cli import app

    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--anchor-kl", "3"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--anchors" in result.output and "webrl probe anchors" in result.output, (
        result.output)
    settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
    bad = settings.artifacts_dir / "anchors.jsonl.gz"
    bad.write_text("not gzip")
    result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--anchor-kl", "3", "--anchors", str(bad)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--anchors" in result.output and "is not a probe file" in result.output, (
        result.output)


def test_a_probe_that_is_no_probe_file_is_refused_in_one_line(settings: Settings, tmp_path: Path) -> None:
    from webrl.cli import app

    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    settings.artifacts_dir.mkdir(parents=True, exist_ok=True)
    bad = settings.artifacts_dir / "probe.jsonl.gz"
    bad.write_text("not gzip")
    for probe, says in ((bad, "is not a probe file"), (Path("/etc/passwd"), "outside the artifacts store")):
        result = CliRunner().invoke(app, ["train", "--actor", str(actor), "--probe", str(probe)],
                                    env={"COLUMNS": "200"})
        assert result.exit_code == 2 and says in result.output, result.output


def test_train_refuses_another_seed_or_preset_on_a_stored_run_naming_the_flag(settings: Settings,
                                                                              tmp_path: Path) -> None:
    from webrl.cli import app
    from webrl.orchestration.pipeline import Pipeline, PipelineOptions

    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    upgrade(settings)
    Pipeline(settings, PipelineOptions(run="r", actor=str(actor.resolve()), seed=0, hyperparams=PRESETS["smoke"]))
    for flags, says in ((["--seed", "1"], "--seed asks 1, the run has seed = 0"),
                        (["--preset", "cpu-demo"], "--preset cpu-demo asks ")):
        result = CliRunner().invoke(app, ["train", "--run", "r", "--actor", str(actor), *flags],
                                    env={"COLUMNS": "300"})
        assert result.exit_code == 2 and says in result.output, result.output


def test_a_record_stored_before_a_field_existed_reads_as_it_ran() -> None:
    from webrl.method.hyperparams import DEFAULTS, parse_hyperparams

    stored = dataclasses.asdict(DEFAULTS)
    del stored["critic"]["backbone_start"]  # a run stored before the critic could start from the actor
    assert parse_hyperparams(stored).critic.backbone_start == "base"
    assert "backbone_start" not in stored["critic"]  # the stored record itself is left as it was
    assert DEFAULTS.critic.backbone_start == "actor"  # a new record is the paper's
    assert parse_hyperparams(dataclasses.asdict(DEFAULTS)).critic.backbone_start == "actor"
