"""A run stores its options with their hyperparameter record; a resume reads them back (only the phase count may
grow) and refuses options it cannot read."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from webrl.agent.early_stop import StopRules
from webrl.config import Settings
from webrl.db import models as m
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.orchestration.pipeline import Pipeline, PipelineOptions
from webrl.wire.contracts import OracleSpec


def test_a_resume_keeps_the_stored_record_and_only_grows_the_phases(settings: Settings) -> None:
    """The stored record resumes, its phase count too: options with another count (a resume without a preset takes
    the defaults') move nothing; ``--phases N`` (``end_at``) grows it."""
    upgrade(settings)
    first = with_overrides(DEFAULTS, {"curriculum.phases": 2, "actor.beta": 2.0})
    Pipeline(settings, PipelineOptions(run="r", seed=3, hyperparams=first))
    four = with_overrides(DEFAULTS, {"curriculum.phases": 4})
    kept = Pipeline(settings, PipelineOptions(run="r", hyperparams=four))
    assert kept.options.seed == 3 and kept.hp.actor.beta == 2.0 and kept.hp.curriculum.phases == 2
    again = Pipeline(settings, PipelineOptions(run="r", hyperparams=four), end_at=4)
    assert again.options.seed == 3 and again.hp.actor.beta == 2.0 and again.hp.curriculum.phases == 4
    fewer = Pipeline(settings, PipelineOptions(run="r", hyperparams=with_overrides(DEFAULTS, {"curriculum.phases": 1})))
    assert fewer.hp.curriculum.phases == 4
    with session_scope(settings) as s:
        assert PipelineOptions.from_json(s.scalar(select(m.Run.options))) == again.options


def test_an_explicit_phase_count_ends_a_resumed_run_early_only_before_that_phase_evaluated(settings: Settings) -> None:
    from webrl.wire.contracts import InvalidRequest

    upgrade(settings)
    three = with_overrides(DEFAULTS, {"curriculum.phases": 3})
    run_id = Pipeline(settings, PipelineOptions(run="r", hyperparams=three)).run_id
    with session_scope(settings) as s:  # phase 2 is rolling out; nothing of phase 3 ran
        s.add(m.Phase(run_id=run_id, index=2, stages_done=["generate", "filter", "rollout"], metrics={}))
    shorter = Pipeline(settings, PipelineOptions(run="r", hyperparams=three), end_at=2)
    assert shorter.hp.curriculum.phases == 2  # phase 2 is now the last: it evaluates every test task
    with session_scope(settings) as s:
        s.scalar(select(m.Phase).where(m.Phase.index == 2)).stages_done = ["generate", "evaluate"]
    with pytest.raises(InvalidRequest, match="cannot end at phase 1: phase 2 has started"):
        Pipeline(settings, PipelineOptions(run="r", hyperparams=three), end_at=1)
    with session_scope(settings) as s:
        s.add(m.Phase(run_id=run_id, index=1, stages_done=["evaluate"], metrics={}))
        s.scalar(select(m.Phase).where(m.Phase.index == 2)).stages_done = []
    with pytest.raises(InvalidRequest, match="phase 1 has already evaluated"):
        Pipeline(settings, PipelineOptions(run="r", hyperparams=three), end_at=1)


def test_options_stored_in_another_layout_are_refused_with_the_reason(settings: Settings) -> None:
    upgrade(settings)
    with session_scope(settings) as s:
        s.add(m.Run(name="old", options={"run": "old", "phases": 3, "tasks_per_phase": 48}))
    with pytest.raises(RuntimeError, match=r"run 'old' was stored with options this webrl cannot read"):
        Pipeline(settings, PipelineOptions(run="old"))


def test_rollout_jobs_carry_the_records_early_stops(settings: Settings) -> None:
    upgrade(settings)
    record = with_overrides(DEFAULTS, {"rollout.max_parse_failures": 2, "rollout.max_repeated_actions": 7,
                                       "rollout.max_steps": 12})
    request = Pipeline(settings, PipelineOptions(run="stops", hyperparams=record)).rollout_request(
        ["k"], 1, OracleSpec(), "train")
    assert request.max_steps == 12
    assert request.stop_rules() == StopRules(max_parse_failures=2, max_repeated_actions=7)
    default = Pipeline(settings, PipelineOptions(run="default")).rollout_request(["k"], 1, OracleSpec(), "train")
    assert default.stop_rules() == StopRules() == StopRules(5, 5)


def test_evaluations_run_at_the_evaluation_concurrency_and_rollouts_at_their_own(settings: Settings) -> None:
    upgrade(settings)
    record = with_overrides(DEFAULTS, {"rollout.concurrency": 8, "evaluation.concurrency": 16})
    pipeline = Pipeline(settings, PipelineOptions(run="eval-concurrency", hyperparams=record))
    assert pipeline.rollout_request(["k"], 1, OracleSpec(), "eval").concurrency == 16
    assert pipeline.rollout_request(["k"], 1, OracleSpec(), "train").concurrency == 8
    unset = Pipeline(settings, PipelineOptions(run="unset", hyperparams=with_overrides(DEFAULTS, {
        "rollout.concurrency": 3})))
    assert unset.rollout_request(["k"], 1, OracleSpec(), "eval").concurrency == 3


def test_a_flag_a_resume_would_ignore_is_refused_naming_it(settings: Settings) -> None:
    """``webrl train --run R --actor-lr X`` on a stored run started at another lr: refused before anything runs,
    naming the flag; the same value, a flag left out, or a new phase count resume."""
    import typer

    from webrl.commands.train import refuse_flags_a_resume_would_ignore
    from webrl.orchestration.pipeline_state import changed_on_resume

    upgrade(settings)
    stored = with_overrides(DEFAULTS, {"actor.lr": 1e-4, "rollout.min_solved": 2})
    assert changed_on_resume(stored, {"actor.lr": 5e-5, "rollout.min_solved": 2, "actor.beta": None,
                                      "curriculum.phases": 9}) == {"actor.lr": (1e-4, 5e-5)}
    given = {"--actor-lr": ("actor.lr", 5e-5), "--min-solved": ("rollout.min_solved", 2),
             "--beta": ("actor.beta", None), "--phases": ("curriculum.phases", 9)}
    refuse_flags_a_resume_would_ignore(settings, "r", given)  # no run named r yet: a new run takes any flag
    Pipeline(settings, PipelineOptions(run="r", hyperparams=stored))
    with pytest.raises(typer.BadParameter, match=r"--actor-lr asks 5e-05, the run has actor.lr = 0.0001") as refused:
        refuse_flags_a_resume_would_ignore(settings, "r", given)
    assert refused.value.param_hint == "--actor-lr"
    refuse_flags_a_resume_would_ignore(settings, "r", {**given, "--actor-lr": ("actor.lr", 1e-4)})
    with session_scope(settings) as s:  # the refusal changed nothing stored
        assert PipelineOptions.from_json(s.scalar(select(m.Run.options))).hyperparams == stored


def test_a_resume_refuses_another_seed_actor_or_preset_naming_the_flag(settings: Settings) -> None:
    """``make demo DEMO_ARGS="--seed 1 --run cpu-demo"`` on seed 0's stored run, or ``--preset cpu-long`` on a
    cpu-demo run, would go on with the stored seed and record: refused, naming the flag; the stored values resume."""
    import typer

    from webrl.commands.train import refuse_flags_a_resume_would_ignore
    from webrl.method.presets import PRESETS

    upgrade(settings)
    Pipeline(settings, PipelineOptions(run="demo", actor="/models/sft", seed=0, hyperparams=PRESETS["cpu-demo"]))
    same = {"--seed": ("seed", 0), "--actor": ("actor", "/models/sft"), "--orm": ("orm", None),
            "--screenshots": ("screenshots", None)}
    refuse_flags_a_resume_would_ignore(settings, "demo", {}, same, preset=("cpu-demo", PRESETS["cpu-demo"]))
    grown = with_overrides(PRESETS["cpu-demo"], {"curriculum.phases": 4})  # a resume may grow the phase count
    refuse_flags_a_resume_would_ignore(settings, "demo", {}, same, preset=("cpu-demo", grown))

    with pytest.raises(typer.BadParameter, match=r"--seed asks 1, the run has seed = 0") as refused:
        refuse_flags_a_resume_would_ignore(settings, "demo", {}, {**same, "--seed": ("seed", 1)})
    assert refused.value.param_hint == "--seed"
    with pytest.raises(typer.BadParameter, match=r"--actor asks '/models/other', the run has actor = '/models/sft'"):
        refuse_flags_a_resume_would_ignore(settings, "demo", {}, {**same, "--actor": ("actor", "/models/other")})
    with pytest.raises(typer.BadParameter, match=r"--preset cpu-long asks curriculum.tasks_per_phase = 48 "
                                                 r"\(the run: 24\)") as refused:
        refuse_flags_a_resume_would_ignore(settings, "demo", {}, same, preset=("cpu-long", PRESETS["cpu-long"]))
    assert refused.value.param_hint == "--preset"
    with session_scope(settings) as s:  # the refusals changed nothing stored
        assert PipelineOptions.from_json(s.scalar(select(m.Run.options))).seed == 0


def test_a_run_stored_before_the_critic_could_start_from_the_actor_resumes_as_it_ran() -> None:
    stored = PipelineOptions(run="old", actor="a").to_json()
    del stored["hyperparams"]["critic"]["backbone_start"]
    assert PipelineOptions.from_json(stored).hyperparams.critic.backbone_start == "base"
    new = PipelineOptions.from_json(PipelineOptions(run="new", actor="a").to_json())
    assert new.hyperparams.critic.backbone_start == "actor"
