"""The episode loop on an in-memory environment: stop conditions, the step records, time limits, crashes,
evaluation, and that the environment is always closed."""

from __future__ import annotations

import asyncio

import pytest

from webrl.agent.actions import ActionParseError, ActionType, parse_action
from webrl.agent.early_stop import MAX_PARSE_FAILURES, MAX_REPEATED_ACTIONS, MAX_STEPS, StopRules
from webrl.agent.environment import Environment, EpisodeCrashed, StepResult
from webrl.agent.episode_loop import run_episode
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.agent.schemas import Observation, TaskConfig
from webrl.evaluation.harness_errors import EvaluationError

TASK = TaskConfig(task_id=7, sites=["shopping"], intent="count the clicks", start_url="__SHOPPING__/")
RESOLVED = TASK.model_copy(update={"start_url": "http://shop.test/"})


class Counter:
    """A page with one button: a click adds one; a click on any other id fails. Records what it was asked."""

    def __init__(self, *, score: float | None = 1.0, crash_at: int | None = None, crash_on_reset: bool = False,
                 step_delay_s: float = 0.0, eval_error: bool = False) -> None:
        self.clicks, self.steps = 0, 0
        self.score, self.crash_at, self.crash_on_reset = score, crash_at, crash_on_reset
        self.step_delay_s, self.eval_error = step_delay_s, eval_error
        self.evaluated: list[str | None] = []
        self.closed = 0

    @property
    def task(self) -> TaskConfig:
        return RESOLVED

    def _page(self, error: str | None = None) -> Observation:
        return Observation(html=f'<button id="1">Count: {self.clicks}</button>', url=f"http://shop.test/{self.clicks}",
                           error=error)

    async def reset(self) -> Observation:
        if self.crash_on_reset:
            raise EpisodeCrashed("browser_error", "no browser")
        return self._page()

    async def step(self, text: str) -> StepResult:
        self.steps += 1
        await asyncio.sleep(self.step_delay_s)
        if self.crash_at == self.steps:
            raise EpisodeCrashed("page_crashed", "the page's renderer crashed")
        try:
            action = parse_action(text)
        except ActionParseError as exc:
            return StepResult(observation=self._page(f"could not parse the action: {exc}"), action=None,
                              parse_error=str(exc), error=f"could not parse the action: {exc}")
        if action.type is ActionType.EXIT:
            return StepResult(observation=self._page(), action=action, done=True, answer=action.message)
        error = None if action.element == "1" else f"no element {action.element}"
        self.clicks += error is None
        return StepResult(observation=self._page(error), action=action, error=error)

    async def evaluate(self, answer: str | None) -> float | None:
        self.evaluated.append(answer)
        if self.eval_error:
            raise EvaluationError("needs a judge")
        return self.score

    async def close(self) -> None:
        self.closed += 1


class Script:
    """A decide function answering the n-th step with the n-th line (the last one repeats)."""

    def __init__(self, *lines: str, version: str = "v1") -> None:
        self.lines, self.version = lines, version
        self.requests: list[PolicyRequest] = []

    async def __call__(self, request: PolicyRequest) -> PolicyResponse:
        self.requests.append(request)
        text = self.lines[min(len(request.history), len(self.lines) - 1)]
        return PolicyResponse(response=text, token_ids=[len(request.history)], logprobs=[-0.5], version=self.version)


CLICK = 'do(action="Click", element="1")'
MISS = 'do(action="Click", element="9")'
SCROLL = 'do(action="Scroll Down")'


def test_fake_environment_satisfies_the_protocol() -> None:
    env: Environment = Counter()
    assert env.task is RESOLVED


async def test_exit_records_every_step_and_evaluates() -> None:
    env, decide = Counter(score=1.0), Script(CLICK, MISS, 'exit(message="1")')
    traj = await run_episode(env, TASK, decide, actor_version="v0")
    assert (traj.task_id, traj.intent) == ("7", TASK.intent)
    assert traj.stop_reason == "exit" and traj.answer == "1" and traj.env_score == 1.0 and env.evaluated == ["1"]
    assert traj.actor_version == "v1" and env.closed == 1
    assert [s.index for s in traj.steps] == [0, 1, 2] and [s.done for s in traj.steps] == [False, False, True]
    assert [s.response for s in traj.steps] == [CLICK, MISS, 'exit(message="1")']
    assert [s.token_ids for s in traj.steps] == [[0], [1], [2]] and traj.steps[0].logprobs == [-0.5]
    # each step keeps the observation it acted on; an action's error is on its own step and in the next page
    assert [s.observation.html for s in traj.steps] == [f'<button id="1">Count: {n}</button>' for n in (0, 1, 1)]
    assert [s.url for s in traj.steps] == ["http://shop.test/0", "http://shop.test/1", "http://shop.test/1"]
    assert traj.steps[1].error == "no element 9" and traj.steps[2].observation.error == "no element 9"
    assert traj.steps[0].action is not None and traj.steps[0].action.format() == CLICK
    assert traj.last_observation is not None and "Count: 1" in traj.last_observation.html
    # the policy sees the resolved task, the task's own intent and the steps so far
    assert all(r.task is RESOLVED and r.intent == TASK.intent for r in decide.requests)
    assert [len(r.history) for r in decide.requests] == [0, 1, 2]


async def test_empty_version_keeps_the_previous_one() -> None:
    traj = await run_episode(Counter(), TASK, Script('exit(message="")', version=""), actor_version="v0")
    assert traj.actor_version == "v0"


async def test_max_steps() -> None:
    traj = await run_episode(Counter(), TASK, Script(CLICK, SCROLL), max_steps=3)
    assert traj.stop_reason == "max_steps" and len(traj.steps) == 3 and traj.steps[-1].done
    assert traj.answer is None and "Count: 1" in traj.last_observation.html


async def test_default_max_steps_is_webrls() -> None:
    alternating = Script(*[CLICK if i % 2 else SCROLL for i in range(MAX_STEPS + 5)])
    traj = await run_episode(Counter(), TASK, alternating)
    assert traj.stop_reason == "max_steps" and len(traj.steps) == MAX_STEPS


async def test_parse_failures_stop_the_episode() -> None:
    traj = await run_episode(Counter(), TASK, Script("not an action"))
    assert traj.stop_reason == "parse_failures" and len(traj.steps) == MAX_PARSE_FAILURES
    assert all(s.action is None and s.parse_error for s in traj.steps)
    assert traj.steps[-1].error.startswith("could not parse the action")


async def test_repeated_actions_stop_the_episode() -> None:
    traj = await run_episode(Counter(), TASK, Script(CLICK))
    assert traj.stop_reason == "repeated_action" and len(traj.steps) == MAX_REPEATED_ACTIONS


async def test_the_stop_rules_given_set_when_an_episode_stops() -> None:
    garbled = await run_episode(Counter(), TASK, Script("not an action"), stop_rules=StopRules(max_parse_failures=2))
    assert garbled.stop_reason == "parse_failures" and len(garbled.steps) == 2
    patient = StopRules(max_repeated_actions=MAX_REPEATED_ACTIONS + 3)
    traj = await run_episode(Counter(), TASK, Script(CLICK), stop_rules=patient)
    assert traj.stop_reason == "repeated_action" and len(traj.steps) == MAX_REPEATED_ACTIONS + 3


async def test_step_timeout_records_the_step() -> None:
    env = Counter(step_delay_s=1.0)
    traj = await run_episode(env, TASK, Script(CLICK), step_timeout_s=0.01)
    assert traj.stop_reason == "step_timeout" and len(traj.steps) == 1
    assert traj.steps[0].error == "step timed out" and traj.steps[0].action is None and traj.steps[0].done
    assert traj.last_observation is not None and "Count: 0" in traj.last_observation.html
    assert env.evaluated == [None] and env.closed == 1  # the episode is still scored, without an answer


async def test_episode_timeout() -> None:
    env = Counter(step_delay_s=0.02)  # 30 steps would take 0.6 s: the episode's limit comes first, however loaded
    traj = await run_episode(env, TASK, Script(*[CLICK, SCROLL] * 15), episode_timeout_s=0.05)
    assert traj.stop_reason == "episode_timeout" and env.closed == 1 and env.evaluated == []
    assert all(s.done == (s is traj.steps[-1]) for s in traj.steps)


async def test_a_crash_ends_the_episode_with_its_reason() -> None:
    env = Counter(crash_at=2)
    traj = await run_episode(env, TASK, Script(CLICK, SCROLL))
    assert traj.stop_reason == "page_crashed" and len(traj.steps) == 1 and traj.steps[0].done
    assert traj.steps[0].error == "the page's renderer crashed"  # the crash is recorded on the last step
    assert traj.last_observation is not None and traj.last_observation.error == "the page's renderer crashed"
    assert env.closed == 1 and env.evaluated == []


async def test_a_crash_on_reset_gives_an_empty_trajectory() -> None:
    env, decide = Counter(crash_on_reset=True), Script(CLICK)
    traj = await run_episode(env, TASK, decide)
    assert traj.stop_reason == "browser_error" and traj.steps == [] and traj.last_observation is None
    assert decide.requests == [] and env.closed == 1


async def test_evaluation() -> None:
    unscorable = Counter(eval_error=True)
    traj = await run_episode(unscorable, TASK, Script('exit(message="x")'))
    assert traj.stop_reason == "exit" and traj.env_score is None and unscorable.evaluated == ["x"]
    no_eval = Counter(score=None)
    assert (await run_episode(no_eval, TASK, Script('exit(message="x")'))).env_score is None
    skipped = Counter()
    traj = await run_episode(skipped, TASK, Script('exit(message="x")'), evaluate=False)
    assert traj.env_score is None and skipped.evaluated == [] and skipped.closed == 1


@pytest.mark.parametrize("error", [RuntimeError("model server down"), TimeoutError("the model server timed out")])
async def test_a_failing_policy_propagates_and_the_environment_closes(error: Exception) -> None:
    async def decide(request: PolicyRequest) -> PolicyResponse:
        raise error

    env = Counter()
    with pytest.raises(type(error), match=str(error)):
        await run_episode(env, TASK, decide, episode_timeout_s=10.0)
    assert env.closed == 1
