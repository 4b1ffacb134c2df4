"""The episode loop, written once: reset the environment, then policy -> action -> observation until a stop
condition, evaluate, close. The browser pool runs it on its own browsers (rollouts); the actor service runs
it on the browser pool service over HTTP (agent runs).

Stopping (docs/design.md step 2, WebArena's ``early_stop`` as WebRL runs it): ``exit(...)``, ``max_steps``
actions, 5 parse failures in a row, 5 identical actions in a row (:class:`webrl.agent.early_stop.EarlyStop`; the
thresholds are the rollout's :class:`webrl.agent.early_stop.StopRules`); also a step or the episode over its time
limit, or an environment that crashed.
"""

from __future__ import annotations

import asyncio
import logging

from webrl.agent.actions import Action
from webrl.agent.early_stop import MAX_STEPS, EarlyStop, StopRules
from webrl.agent.environment import Environment, EpisodeCrashed
from webrl.agent.policy import Decide, PolicyRequest, PolicyResponse
from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory

log = logging.getLogger(__name__)


async def run_episode(env: Environment, task: TaskConfig, decide: Decide, *, max_steps: int = MAX_STEPS,
                      step_timeout_s: float | None = None, episode_timeout_s: float | None = None,
                      evaluate: bool = True, actor_version: str = "", stop_rules: StopRules = StopRules()
                      ) -> Trajectory:
    """One episode of ``decide`` on ``task`` in ``env`` (a fresh one; the loop resets and closes it).

    Returns the trajectory: its steps (the last one ``done``), the answer of an ``exit``, the last
    observation, the evaluator's score when ``evaluate`` (None when the task has none or its evaluator
    cannot run here), ``actor_version`` updated to the version of each response, and ``stop_reason``: ``exit``,
    ``max_steps``, ``parse_failures`` or ``repeated_action`` (the thresholds of ``stop_rules``), ``step_timeout``,
    ``episode_timeout`` or the :class:`EpisodeCrashed` reason (its message then becomes the last step's error).
    ``None`` time limits mean none. Raises what ``decide`` raises and what the environment raises besides
    :class:`EpisodeCrashed`.
    """
    traj = Trajectory(task_id=str(task.task_id), intent=task.intent, actor_version=actor_version)
    limit = asyncio.timeout(episode_timeout_s)
    try:
        async with limit:
            observation = await env.reset()
            await _steps(env, task, decide, observation, traj, max_steps, step_timeout_s, EarlyStop(stop_rules))
            if evaluate:
                traj.env_score = await _score(env, traj.answer)
    except TimeoutError:
        if not limit.expired():  # not this episode's time limit: a policy's or an environment's own error
            raise
        traj.stop_reason = "episode_timeout"
    except EpisodeCrashed as exc:
        log.warning("episode of task %s ended: %s", task.task_id, exc)
        traj.stop_reason = exc.reason
        _record_failure(traj, str(exc))
    finally:
        await env.close()
    if traj.steps:
        traj.steps[-1].done = True
    return traj


async def _steps(env: Environment, task: TaskConfig, decide: Decide, obs: Observation, traj: Trajectory,
                 max_steps: int, step_timeout_s: float | None, streaks: EarlyStop) -> None:
    """Policy -> action -> observation, until a stop condition; fills ``traj``."""
    traj.stop_reason = "max_steps"
    for index in range(max_steps):
        request = PolicyRequest(task=env.task, intent=task.intent, observation=obs, history=list(traj.steps))
        response = await decide(request)
        traj.actor_version = response.version or traj.actor_version
        try:
            result = await asyncio.wait_for(env.step(response.response), step_timeout_s)
        except TimeoutError:
            traj.steps.append(_step(index, obs, response, None, None, "step timed out"))
            traj.stop_reason = "step_timeout"
            break
        traj.steps.append(_step(index, obs, response, result.action, result.parse_error, result.error))
        obs = result.observation
        if result.done:
            traj.answer, traj.stop_reason = result.answer, "exit"
            break
        stop = streaks.update(result.action)
        if stop:
            traj.stop_reason = stop
            break
    traj.last_observation = obs


def _step(index: int, obs: Observation, response: PolicyResponse, action: Action | None,
          parse_error: str | None, error: str | None) -> Step:
    return Step(index=index, observation=obs, response=response.response, action=action, parse_error=parse_error,
                token_ids=list(response.token_ids), logprobs=list(response.logprobs), url=obs.url, error=error)


async def _score(env: Environment, answer: str | None) -> float | None:
    """The evaluator's score; None (logged) when this task's evaluator cannot run here, so one task's
    unsupported eval block does not end a whole batch."""
    from webrl.evaluation.harness_errors import EvaluationError  # lazily: the evaluators bring Playwright

    try:
        return await env.evaluate(answer)
    except EvaluationError as exc:
        log.warning("task %s not scored: %s", env.task.task_id, exc)
        return None


def _record_failure(traj: Trajectory, message: str) -> None:
    """A crash's message on the last step (unless it has an error already) and on the last observation."""
    if traj.steps and traj.steps[-1].error is None:
        traj.steps[-1].error = message
    if traj.last_observation is None and traj.steps:
        traj.last_observation = traj.steps[-1].observation.model_copy(update={"error": message})
