"""The episode loop: stop conditions (exit, 30 steps, 5 parse failures, 5 identical actions), errors in the
next observation, every step stored; run_batch hands the policy batches."""

from __future__ import annotations

import asyncio

import pytest

from services.browser_pool.runs import run_batch, run_episode
from webrl.agent.early_stop import MAX_STEPS
from webrl.agent.policy import PolicyRequest, PolicyResponse

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


class Scripted:
    """Answers each episode's steps from a script (the last line repeats); records batch sizes."""

    def __init__(self, script: list[str], delay_s: float = 0.0) -> None:
        self.script, self.delay_s = script, delay_s
        self.batches: list[int] = []

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        self.batches.append(len(requests))
        await asyncio.sleep(self.delay_s)
        return [PolicyResponse(response=self.script[min(len(r.history), len(self.script) - 1)], token_ids=[1, 2],
                               logprobs=[-0.5, -0.25], version="scripted-1") for r in requests]


async def test_exit_answer_and_steps(pool, pool_settings, fixture_url, make_task):
    policy = Scripted(['do(action="Click", element="0")', 'do(action="Click", element="42")',
                       "# the count is 1\nexit(message=\"1\")"])
    traj = await run_episode(make_task(f"{fixture_url}/actions.html"), policy, pool, pool_settings)
    assert traj.stop_reason == "exit" and traj.answer == "1" and traj.actor_version == "scripted-1"
    assert [s.index for s in traj.steps] == [0, 1, 2] and [s.done for s in traj.steps] == [False, False, True]
    assert "Count: 0" in traj.steps[0].observation.html and "Count: 1" in traj.steps[1].observation.html
    assert traj.steps[1].error and "element 42" in traj.steps[1].error
    assert traj.steps[2].observation.error == traj.steps[1].error  # the error shows in the next observation
    assert traj.steps[0].token_ids == [1, 2] and traj.steps[0].logprobs == [-0.5, -0.25]
    assert traj.last_observation is not None and "Count: 1" in traj.last_observation.html
    assert traj.env_score is None  # no eval block


@pytest.mark.parametrize(("script", "reason", "n_steps"), [
    (["not an action"], "parse_failures", 5),
    (['do(action="Hover", element="1")'], "repeated_action", 5),
    (['do(action="Click", element="0")', 'do(action="Hover", element="1")'] * 3 + ["garbage"] * 4 +
     ['do(action="Scroll Down")', "garbage"], None, None),
])
async def test_early_stops(pool, pool_settings, fixture_url, make_task, script, reason, n_steps):
    traj = await run_episode(make_task(f"{fixture_url}/actions.html"), Scripted(script), pool, pool_settings,
                             max_steps=14)
    if reason is None:  # alternating actions and broken streaks never trip the early stops
        assert traj.stop_reason == "max_steps" and len(traj.steps) == 14
    else:
        assert traj.stop_reason == reason and len(traj.steps) == n_steps
    assert traj.steps[-1].done and not any(s.done for s in traj.steps[:-1])


async def test_max_steps_default_is_thirty():
    assert MAX_STEPS == 30


async def test_run_batch_batches_requests(pool_settings, fixture_url, make_task):
    from services.browser_pool.pool import BrowserPool

    tasks = [make_task(f"{fixture_url}/actions.html", task_id=str(i)) for i in range(4)]
    policy = Scripted(['do(action="Click", element="0")', 'do(action="Scroll Down")', 'exit(message="ok")'])
    async with BrowserPool(pool_settings, size=2) as two:
        trajs = await run_batch(tasks, policy, two, pool_settings, concurrency=2, batch_wait_s=5.0)
    assert [t.task_id for t in trajs] == ["0", "1", "2", "3"]
    assert all(t.stop_reason == "exit" and len(t.steps) == 3 for t in trajs)
    assert sum(policy.batches) == 12 and max(policy.batches) == 2  # two episodes share each policy call
    assert len(policy.batches) <= 7


async def test_step_and_episode_timeouts(pool, pool_settings, fixture_url, make_task):
    task = make_task(f"{fixture_url}/actions.html")
    quick = pool_settings.replace(browser={"step_timeout_s": 1.0})
    hang = Scripted(['do(action="Click", element="7")'])  # "Hanging page": the server answers after 4 s
    traj = await run_episode(task, hang, pool, quick)
    assert "Hanging page" in traj.steps[0].observation.html and 'id="7"> Hanging page' in traj.steps[0].observation.html
    assert traj.stop_reason == "step_timeout" and traj.steps[-1].error == "step timed out"
    short = pool_settings.replace(browser={"episode_timeout_s": 1.5})
    scrolling = Scripted(['do(action="Scroll Down")', 'do(action="Scroll Up")'] * 15, delay_s=0.1)
    traj = await run_episode(task, scrolling, pool, short)
    assert traj.stop_reason == "episode_timeout" and len(traj.steps) < 15  # 15 policy calls alone take 1.5 s
    # The pool is still usable after both.
    traj = await run_episode(task, Scripted(['exit(message="fine")']), pool, pool_settings)
    assert traj.stop_reason == "exit" and traj.answer == "fine"
