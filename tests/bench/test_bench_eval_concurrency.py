"""bench/eval_concurrency.py: its settings' syntax (episodes at once, chunk, threads, kept prompts) and the actions
it compares between settings, read back task by task in step order."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from webrl.agent.actions import Action, ActionType
from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
from webrl.config import Settings
from webrl.db import repository as repo
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope


def test_settings_name_threads_and_kept_prompts(load_bench: Callable[[str], ModuleType]) -> None:
    bench = load_bench("eval_concurrency")
    grid = bench._parse_settings("16x65/0,16x65,8x16@2,8x16@1/32")
    assert grid == [(16, 65, 0, 0), (16, 65, 0, -1), (8, 16, 2, -1), (8, 16, 1, 32)]
    assert [bench._label(g) for g in grid] == ["16x65/0", "16x65", "8x16@2", "8x16@1/32"]
    assert bench._parse_settings(",".join(bench._label(g) for g in grid)) == grid  # what a child is told


def _episode(responses: list[str]) -> Trajectory:
    page = Observation(html='<button id="1">Go</button>', url="http://s/")
    steps = [Step(index=i, observation=page, response=r, action=Action(type=ActionType.CLICK, element="1"))
             for i, r in enumerate(responses)]
    return Trajectory(task_id="t", intent="Go", actor_version="v", steps=steps, stop_reason="max_steps",
                      env_score=0.0, last_observation=page)


def test_actions_are_read_per_task_in_step_order(settings: Settings,
                                                 load_bench: Callable[[str], ModuleType]) -> None:
    bench = load_bench("eval_concurrency")
    upgrade(settings)
    config = TaskConfig(task_id=1, sites=["shopping"], intent="Go", start_url="http://s/", eval={"eval_types": []})
    with session_scope(settings) as s:
        first = repo.upsert_task(s, "sandbox/test/1", config, origin="test", split="test")
        second = repo.upsert_task(s, "sandbox/test/2", config.model_copy(update={"task_id": 2}), origin="test",
                                  split="test")
        ids = [repo.save_trajectory(s, first.id, 0, 1, _episode(["a", "b", "c"]), purpose="eval").id,
               repo.save_trajectory(s, second.id, 0, 1, _episode(["d"]), purpose="eval").id,
               repo.save_trajectory(s, first.id, 0, 2, _episode(["x"]), purpose="eval").id]
    assert bench._actions(settings, ids[:2]) == {"sandbox/test/1": ["a", "b", "c"], "sandbox/test/2": ["d"]}
    assert bench._actions(settings, ids[2:]) == {"sandbox/test/1": ["x"]}
