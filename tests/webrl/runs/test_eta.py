"""The run's time left, estimated from the stages it timed so far, against sums done by hand."""

from __future__ import annotations

import pytest

from webrl.method.hyperparams import DEFAULTS, with_overrides
from webrl.runs.eta import PlannedStage, RunEta, minutes, run_plan

HP = with_overrides(DEFAULTS, {"curriculum.phases": 2, "evaluation.subset": 65, "curriculum.tasks_per_phase": 48,
                               "curriculum.seed_tasks": 48, "evaluation.tasks": 165})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_plan_is_phase_0_then_every_stage_of_each_phase_with_its_episodes() -> None:
    plan = run_plan(HP)
    assert plan[:2] == [PlannedStage(0, "evaluate", 165), PlannedStage(0, "seed-rollout", 48)]
    assert [(s.phase, s.stage, s.episodes) for s in plan[2:8]] == [
        (1, "generate", None), (1, "filter", None), (1, "rollout", 48), (1, "label", None), (1, "train", None),
        (1, "evaluate", 65)]  # a middle phase evaluates the subset
    assert len(plan) == 2 + 2 * 6 and plan[-1] == PlannedStage(2, "evaluate", 165)  # the last phase all tasks
    assert run_plan(with_overrides(HP, {"evaluation.subset": None}))[7].episodes == 165
    assert plan[1].progress_label == "phase 0: seed rollout"
    # a run that validates its updates plans that stage too, one episode per validation task
    validated = run_plan(with_overrides(HP, {"evaluation.validation_tasks": 40}))
    assert [(s.stage, s.episodes) for s in validated[6:9]] == [("train", None), ("validate", 40), ("evaluate", 65)]
    assert len(validated) == 2 + 2 * 7


def _after_phase_0(clock: Clock) -> RunEta:
    eta = RunEta(run_plan(HP), clock)
    clock.now += 330
    eta.record(0, "evaluate", {"seconds": 330.0, "n": 165, "success": 0.1})  # 2 s per episode
    clock.now += 192
    eta.record(0, "seed-rollout", {"seconds": 192.0, "rollouts": 48})  # 4 s per episode
    return eta


def test_unknown_stages_are_named_and_episodic_ones_scaled_from_any_rollout() -> None:
    eta = _after_phase_0(clock := Clock())
    # rollout: never timed, so (330 + 192) / (165 + 48) s per episode of any episodic stage, times 48 episodes;
    # evaluate: its own 2 s per episode, times 65 (phase 1) and 165 (phase 2)
    rollout = 522 / 213 * 48
    left, unknown = eta.seconds_left()
    assert left == pytest.approx(2 * rollout + 2 * 65 + 2 * 165)
    assert unknown == ["generate", "filter", "label", "train"]
    assert eta.line() == ("run: phase 1 of 2, generate · more than 12 min left (not timed yet: generate, filter, "
                          "label, train)")
    clock.now += 10_000  # time in an unknown stage changes nothing
    assert eta.seconds_left()[0] == pytest.approx(left)


def test_every_stage_timed_once_gives_the_whole_run_s_time_left() -> None:
    eta = _after_phase_0(clock := Clock())
    for stage, metrics in [("generate", {"seconds": 6}), ("filter", {"seconds": 54}),
                           ("rollout", {"seconds": 240.0, "rollouts": 48}), ("label", {"seconds": 12}),
                           ("train", {"seconds": 600.0}), ("evaluate", {"seconds": 130.0, "n": 65})]:
        eta.record(1, stage, metrics)
    clock.now += 3  # phase 2's generate has run 3 s
    # generate 6 - 3, filter 54, rollout 5 s x 48, label 12, train 600, evaluate (330 + 130) / (165 + 65) x 165
    assert eta.seconds_left() == (pytest.approx(3 + 54 + 240 + 12 + 600 + 330), [])
    assert eta.line() == "run: phase 2 of 2, generate · ~21 min left"
    clock.now += 100  # past its estimate: the running stage has nothing left, never less
    assert eta.seconds_left()[0] == pytest.approx(54 + 240 + 12 + 600 + 330)


def test_the_running_stage_s_progress_estimates_before_anything_finished() -> None:
    eta = RunEta(run_plan(HP), clock := Clock())
    assert eta.line() == "run: phase 0 of 2, evaluate · estimating..."
    clock.now += 30
    eta.progress("phase 0: evaluate: actor service loads actor-sft", 1, 1)  # not the stage's episodes
    assert eta.live is None
    eta.progress("phase 0: evaluate", 10, 165)  # 3 s per episode so far
    left, unknown = eta.seconds_left()
    # evaluate: 3 s x 155 left; every other episodic stage 3 s per episode: 48 + (48 + 65) + (48 + 165)
    assert left == pytest.approx(3 * 155 + 3 * (48 + 48 + 65 + 48 + 165))
    assert unknown == ["generate", "filter", "label", "train"]


def test_a_rollouts_later_attempts_are_followed_from_their_own_start() -> None:
    """``--min-solved``: attempt 2 rolls out the unsolved tasks under its own label; the time left is its episodes
    at its own pace, not attempt 1's finished count (which left 0 s while attempt 2 ran)."""
    eta = RunEta(run_plan(HP), clock := Clock())
    for phase, stage in [(0, "evaluate"), (0, "seed-rollout"), (1, "generate"), (1, "filter")]:
        eta.record(phase, stage, {"seconds": 1.0})
    eta.progress("phase 1: rollout", 48, 48)
    clock.now += 480  # attempt 1: 10 s an episode
    eta.progress("phase 1: rollout, attempt 2 (30 unsolved)", 0, 30)
    clock.now += 60
    eta.progress("phase 1: rollout, attempt 2 (30 unsolved)", 10, 30)  # 6 s an episode since attempt 2 began
    assert eta._current_left(eta.current()) == pytest.approx(6 * 20)
    eta.progress("phase 1: rollout attempt", 1, 2)  # not this stage's label: ignored
    assert eta.live == (10, 30)


def test_a_stored_evaluation_teaches_nothing_and_a_resume_starts_from_the_rows() -> None:
    eta = RunEta(run_plan(HP), Clock())
    eta.record(0, "evaluate", {"seconds": 0.2, "n": 165, "stored": "0123456789ab"})
    assert eta.current() == PlannedStage(0, "seed-rollout", 48) and eta.timings == {}
    rows = [{"phase": 0, "status": "done", "evaluate.seconds": 330.0, "evaluate.n": 165,
             "seed-rollout.seconds": 192.0, "seed-rollout.rollouts": 48},
            {"phase": 1, "status": "running", "generate.seconds": 6.0, "generate.generated": 96}]
    resumed = RunEta.of_rows(run_plan(HP), rows, Clock())
    assert resumed.current() == PlannedStage(1, "filter", None)
    assert resumed.estimate(PlannedStage(2, "generate")) == 6.0
    assert resumed.estimate(PlannedStage(2, "evaluate", 165)) == pytest.approx(330.0)
    for phase, stage in [(s.phase, s.stage) for s in resumed.plan]:
        resumed.record(phase, stage, {})
    assert resumed.line() == "run: done"


def test_a_resumed_stage_counts_only_the_episodes_it_ran() -> None:
    """Killed halfway through phase 0's evaluation and resumed: the 100 episodes stored before were reused, so the
    stage's 130 s timed the other 65 (2 s each), not 165 (0.8 s each, which would shrink every later estimate)."""
    from webrl.runs.eta import timing_of

    timing = timing_of("evaluate", {"seconds": 130.0, "n": 165, "reused": 100})
    assert timing is not None and timing.episodes == 65
    assert timing_of("evaluate", {"seconds": 3.0, "n": 165, "reused": 165}) is None  # it ran nothing
    assert timing_of("evaluate", {"seconds": 330.0, "n": 165}).episodes == 165


def test_minutes() -> None:
    assert [minutes(s) for s in (10, 90, 2040, 7500)] == ["<1 min", "2 min", "34 min", "2 h 05 min"]
