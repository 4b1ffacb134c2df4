"""With ``rollout.min_solved``, a phase's rollout stage tries the tasks it has not solved again (the next attempt)
until enough of its tasks are solved or ``rollout.max_attempts`` attempts ran; without it, one attempt. A run's
sampled rollouts are seeded: another run with the same seed samples the same episodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from webrl.agent.schemas import Observation, Step, Trajectory
from webrl.config import Settings
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.method.hyperparams import with_overrides
from webrl.method.presets import PRESETS
from webrl.method.rewards import EVALUATOR_LABELS
from webrl.orchestration.pipeline import PhaseState, Pipeline, PipelineOptions
from webrl.sandbox.tasks.suite import load_suite

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _attempts(settings: Settings, run_id: int) -> dict[str, list[int]]:
    """{task key: the attempts of its training episodes in phase 1 of the run}."""
    with session_scope(settings) as s:
        rows = repo.trajectories_for_phase(s, 1, purpose="train", run_id=run_id)
        out: dict[str, list[int]] = {}
        for row in rows:
            out.setdefault(row.task.key, []).append(row.attempt)
    return {k: sorted(v) for k, v in out.items()}


def _solved_before(settings: Settings, run_id: int, key: str, attempt: int = 9) -> None:
    """An episode of ``key`` in phase 1 of the run that the sandbox evaluator scored a success (attempt 9: none the
    stage runs)."""
    with session_scope(settings) as s:
        task = next(t for t in repo.tasks_where(s, split="train") if t.key == key)
        traj = Trajectory(task_id=key, intent="done", steps=[
            Step(index=0, observation=Observation(html="<html></html>", url="http://s/"), response="exit()")])
        row = repo.save_trajectory(s, task.id, 1, attempt, traj, purpose="train", run_id=run_id)
        repo.save_label(s, row.id, EVALUATOR_LABELS, p_yes=1.0, threshold=0.5)


def _solved_in(settings: Settings, run_id: int, attempt: int) -> set[str]:
    """The tasks whose phase-1 training episode of ``attempt`` the sandbox evaluator scored a success."""
    with session_scope(settings) as s:
        rows = repo.trajectories_for_phase(s, 1, purpose="train", run_id=run_id)
        return {row.task.key for row in rows if row.attempt == attempt
                and (label := repo.label_of(row, EVALUATOR_LABELS)) is not None and label.reward == 1.0}


def _responses(settings: Settings, run_id: int, attempt: int) -> dict[str, list[str]]:
    """{task key: the responses of its phase-1 training episode of ``attempt``, step by step}."""
    with session_scope(settings) as s:
        rows = repo.trajectories_for_phase(s, 1, purpose="train", run_id=run_id)
        return {row.task.key: [step.response for step in sorted(row.steps, key=lambda st: st.index)]
                for row in rows if row.attempt == attempt}


def test_unsolved_tasks_are_tried_again_until_enough_are_solved(world: Settings, tiny_actor: Path) -> None:
    from webrl.sandbox.server import running_sandbox, sandbox_ports

    upgrade(world)
    load_suite(world, world.seed)
    with session_scope(world) as s:
        keys = [t.key for t in repo.tasks_where(s, split="train", origin="seed")][:3]
    smoke = with_overrides(PRESETS["smoke"], {"rollout.max_steps": 2, "rollout.concurrency": 3,
                                              "rollout.temperature": 0.7})
    state = PhaseState(kept_keys=keys)

    def pipeline(run: str, **overrides: int) -> Pipeline:
        return Pipeline(world, PipelineOptions(run=run, actor=str(tiny_actor),
                                               hyperparams=with_overrides(smoke, overrides)))

    with running_sandbox(world, ports=sandbox_ports(world)):
        once = pipeline("once", **{"rollout.max_attempts": 3})  # min_solved 0: one attempt, whatever max_attempts
        metrics, _ = once._stage_rollout(1, state)
        assert _attempts(world, once.run_id) == {k: [0] for k in keys}
        assert metrics["rollouts"] == 3 and "attempts" not in metrics
        # the same seed, phase and attempt in another run: the same sampled episodes, step for step
        twice = pipeline("twice", **{"rollout.max_attempts": 3})
        twice._stage_rollout(1, state)
        first = _responses(world, once.run_id, 0)
        assert _responses(world, twice.run_id, 0) == first and sum(map(len, first.values())) >= 3

        # one task already solved in this phase (attempt 9): the tiny actor solves none of the others in 2 steps, so
        # with 2 wanted the unsolved two are tried again, up to the third attempt
        retried = pipeline("retried", **{"rollout.min_solved": 2, "rollout.max_attempts": 3})
        _solved_before(world, retried.run_id, keys[0])
        metrics, _ = retried._stage_rollout(1, state)
        attempts = _attempts(world, retried.run_id)
        solved = metrics["solved_by_attempt"]
        assert attempts[keys[0]] == [0, 9]  # solved: not tried again
        assert len(solved) == metrics["attempts"] and solved[0] >= 1 and solved == sorted(solved)
        if solved[-1] < 2:  # never enough: every attempt ran on what was still unsolved
            assert metrics["attempts"] == 3 and all(attempts[k] == [0, 1, 2] for k in keys[1:])
        assert metrics["rollouts"] == sum(len(a) for a in attempts.values()) - 1  # the stored one is not its own
        again, _ = retried._stage_rollout(1, state)  # resumed: every episode is found, none runs again
        assert again == metrics and _attempts(world, retried.run_id) == attempts

        # enough solved after the first attempt: no second one
        enough = pipeline("enough", **{"rollout.min_solved": 1, "rollout.max_attempts": 3})
        _solved_before(world, enough.run_id, keys[0])
        metrics, _ = enough._stage_rollout(1, state)
        assert metrics["attempts"] == 1
        assert all(a[0] == 0 and 1 not in a for a in _attempts(world, enough.run_id).values())

        # resumed after a kill that stored a later attempt's success: it does not count before its attempt, so
        # the stage decides as an uninterrupted one did (the first attempt's own successes only)
        resumed = pipeline("resumed", **{"rollout.min_solved": 1, "rollout.max_attempts": 3})
        _solved_before(world, resumed.run_id, keys[1], attempt=1)
        metrics, _ = resumed._stage_rollout(1, state)
        first_solved = _solved_in(world, resumed.run_id, attempt=0)
        assert metrics["solved_by_attempt"][0] == len(first_solved)
        if not first_solved:  # not enough after the first attempt: the second ran, and found the stored episode
            assert metrics["attempts"] >= 2 and metrics["solved_by_attempt"][1] >= 1
