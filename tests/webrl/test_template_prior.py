"""The filter's judge before a critic exists (webrl.store.template_prior): a task is worth its template's Beta-smoothed
success rate over the run's own training rollouts, and only training rollouts count."""

from __future__ import annotations

import pytest

from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.config import Settings
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.store.template_prior import template_values

VERSION = "env-evaluator"
RUN = 1  # runs.id of the first run in a fresh database: the pipeline's run in the last test


def _task(session, key: str, template: int) -> None:
    config = TaskConfig(task_id=0, sites=["shopping"], intent=f"intent {key}", start_url="__SHOPPING__/",
                        intent_template_id=template)
    repo.upsert_task(session, key, config, origin="seed", split="train")


def _attempt(session, key: str, phase: int, attempt: int, solved: bool, purpose: str = "train",
             run_id: int = RUN) -> None:
    task = repo.tasks_by_keys(session, [key])[0]
    traj = Trajectory(task_id=key, intent=task.intent, env_score=float(solved),
                      steps=[Step(index=0, observation=Observation(html="<html></html>", url="http://s/"),
                                 response='exit(message="done")')])
    row = repo.save_trajectory(session, task.id, phase, attempt, traj, purpose=purpose, run_id=run_id)
    repo.save_label(session, row.id, VERSION, p_yes=float(solved), threshold=0.5)


@pytest.fixture
def store(settings: Settings) -> Settings:
    upgrade(settings)
    with session_scope(settings) as s:
        for key, template in [("seen/1", 1), ("seen/2", 1), ("hard/1", 2), ("new/1", 3), ("easy/1", 4)]:
            _task(s, key, template)
        _attempt(s, "seen/1", 0, 0, solved=True)
        _attempt(s, "seen/2", 0, 0, solved=False)
        for attempt in range(16):
            _attempt(s, "hard/1", 0, attempt, solved=False)
        for attempt in range(12):
            _attempt(s, "easy/1", 0, attempt, solved=True)
        _attempt(s, "new/1", 0, 0, solved=True, purpose="eval")  # the test split never steers the curriculum
        for attempt in range(8):  # another run's successes: not this run's actor
            _attempt(s, "hard/1", 0, attempt, solved=True, run_id=RUN + 1)
    return settings


def test_values_are_the_templates_smoothed_success(store: Settings) -> None:
    keys = ["seen/2", "hard/1", "new/1", "easy/1"]
    with session_scope(store) as s:
        values = template_values(s, keys, phases=[0], orm_version=VERSION, run_id=RUN)
    assert values["seen/2"] == pytest.approx((1 + 1) / (2 + 5))  # template 1: 1 of 2, shared by its tasks
    assert values["hard/1"] == pytest.approx(1 / 21) and values["hard/1"] < 0.05  # out of [0.05, 0.75]: hopeless
    assert values["new/1"] == pytest.approx(0.2)  # only an eval rollout: unseen, the prior
    assert values["easy/1"] == pytest.approx(13 / 17) and values["easy/1"] > 0.75  # learnt


def test_phases_not_asked_for_and_other_label_versions_do_not_count(store: Settings) -> None:
    with session_scope(store) as s:
        assert template_values(s, ["seen/1"], phases=[1], orm_version=VERSION, run_id=RUN)["seen/1"] \
            == pytest.approx(0.2)
        assert template_values(s, ["seen/1"], phases=[0], orm_version="orm:x", run_id=RUN)["seen/1"] \
            == pytest.approx(0.2)


def test_only_the_runs_own_rollouts_count(store: Settings) -> None:
    with session_scope(store) as s:
        other = template_values(s, ["hard/1", "seen/1"], phases=[0], orm_version=VERSION, run_id=RUN + 1)
    assert other["hard/1"] == pytest.approx(9 / 13)  # its 8 successes only, none of run 1's 16 failures
    assert other["seen/1"] == pytest.approx(0.2)  # a template only run 1 tried: unseen for this run


def test_unknown_keys_are_named(store: Settings) -> None:
    with session_scope(store) as s, pytest.raises(LookupError, match="nope"):
        template_values(s, ["seen/1", "nope"], phases=[0], orm_version=VERSION, run_id=RUN)


def test_phase_one_without_a_critic_or_orm_keeps_promising_templates_first(store: Settings) -> None:
    from webrl.method.hyperparams import DEFAULTS, with_overrides
    from webrl.orchestration.pipeline import PhaseState, Pipeline, PipelineOptions

    hp = with_overrides(DEFAULTS, {"curriculum.tasks_per_phase": 2, "curriculum.fill_filter": False})
    pipeline = Pipeline(store, PipelineOptions(run="prior", actor="/models/actor-sft", hyperparams=hp))
    assert pipeline.run_id == RUN  # the run the fixture's rollouts were stored under
    candidates = ["hard/1", "new/1", "easy/1", "seen/2"]
    metrics, state = pipeline._stage_filter(1, PhaseState(candidate_keys=candidates))
    assert metrics["judge"] == "templates" and metrics["in_band"] == 2
    assert state.kept_keys == ["seen/2", "new/1"]  # in the band, the template solved 1 of 2 before the unseen one

    keep_all = with_overrides(hp, {"curriculum.judge_before_critic": "none"})
    pipeline = Pipeline(store, PipelineOptions(run="keep-all", actor="/models/actor-sft", hyperparams=keep_all))
    metrics, state = pipeline._stage_filter(1, PhaseState(candidate_keys=candidates))
    assert metrics["judge"] == "none" and state.kept_keys == ["hard/1", "new/1"]



def test_the_templates_judge_values_tasks_in_every_phase_when_asked(store: Settings,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``curriculum.filter_judge = "templates"``: a phase with a critic still values its candidates by their
    templates, without asking the critic; the default asks the critic."""
    from webrl.method.hyperparams import DEFAULTS, with_overrides
    from webrl.orchestration import pipeline as pipeline_module
    from webrl.orchestration.pipeline import PhaseState, Pipeline, PipelineOptions

    def no_pool(request: object) -> None:
        raise RuntimeError("the critic's values start from the candidates' start pages")

    monkeypatch.setattr(pipeline_module.clients, "rollout_observe", no_pool)
    candidates = ["hard/1", "new/1", "easy/1", "seen/2"]
    hp = with_overrides(DEFAULTS, {"curriculum.tasks_per_phase": 2, "curriculum.fill_filter": False})
    for judge in ("templates", "critic"):
        options = PipelineOptions(run="prior" if judge == "templates" else "critic-judged", actor="/models/actor-sft",
                                  hyperparams=with_overrides(hp, {"curriculum.filter_judge": judge}))
        pipeline = Pipeline(store, options)
        monkeypatch.setattr(pipeline, "critic_for_phase", lambda index: "/models/critic-1")  # phase 1 published one
        if judge == "critic":
            with pytest.raises(RuntimeError, match="start pages"):
                pipeline._stage_filter(2, PhaseState(candidate_keys=candidates))
            continue
        metrics, state = pipeline._stage_filter(2, PhaseState(candidate_keys=candidates))
        assert metrics["judge"] == "templates" and metrics["in_band"] == 2
        assert state.kept_keys == ["seen/2", "new/1"]
