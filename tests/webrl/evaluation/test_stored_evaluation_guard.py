"""A stored evaluation holds the actor's results only: an episode the machinery ended (a crashed browser) is not
the actor's 0, so an evaluation that holds one is never stored for later runs to read back."""

from __future__ import annotations

import hashlib
import json

import pytest

from webrl.agent.schemas import Trajectory
from webrl.config import Settings
from webrl.db.migrate import upgrade
from webrl.db.repository import save_trajectory, tasks_where
from webrl.db.session import session_scope
from webrl.orchestration.stored_evaluation import store_if_complete, store_trajectories
from webrl.sandbox.tasks.suite import load_suite
from webrl.store.evaluations import EvaluationKey, find


def _key(n_tasks: int) -> EvaluationKey:
    return EvaluationKey(actor_sha256="a" * 64, tasks_sha256="t" * 64, n_tasks=n_tasks, max_steps=8,
                         max_parse_failures=5, max_repeated_actions=5, dtype="float32", max_prompt_tokens=2048,
                         code_sha256="c" * 64, sandbox_seed=0, torch="2", transformers="5")


def _episodes(settings: Settings, stop_reasons: list[str], attempt: int = 1) -> list[int]:
    with session_scope(settings) as s:
        tasks = tasks_where(s, split="test")[: len(stop_reasons)]
        return [save_trajectory(s, task.id, 0, attempt, Trajectory(task_id=task.key, intent="x", steps=[],
                                                                   env_score=0.0, stop_reason=reason),
                                purpose="eval").id
                for task, reason in zip(tasks, stop_reasons, strict=True)]


def test_an_evaluation_with_an_episode_a_crash_ended_is_not_stored(settings: Settings) -> None:
    upgrade(settings)
    load_suite(settings, 0)
    ids = _episodes(settings, ["max_steps", "browser_crashed", "answered"])
    with pytest.raises(ValueError, match=r"1 episode\(s\) ended by the machinery.*browser_crashed"):
        store_trajectories(settings, _key(3), ids)
    assert store_if_complete(settings, _key(3), ids) is None and find(settings, _key(3)) is None
    kept = [ids[0], ids[2]]  # the actor's own endings, a 0 among them, are its results
    assert store_trajectories(settings, _key(2), kept).is_file() and find(settings, _key(2)) is not None


def test_a_resumed_evaluation_is_not_stored(settings: Settings) -> None:
    """Episodes stored before the evaluation started (a resumed one's, from before a kill, under the code and
    settings of then) are never stored under today's key; the same evaluation made whole now is."""
    from webrl.orchestration.stored_evaluation import newest_trajectory_id

    upgrade(settings)
    load_suite(settings, 0)
    assert newest_trajectory_id(settings) == 0
    before_the_kill = _episodes(settings, ["max_steps"])
    started = newest_trajectory_id(settings)
    assert started == before_the_kill[0]
    after_the_resume = _episodes(settings, ["max_steps", "answered"])[1:]
    assert store_if_complete(settings, _key(2), before_the_kill + after_the_resume, made_after=started) is None
    assert find(settings, _key(2)) is None
    made_now = _episodes(settings, ["max_steps", "answered"], attempt=2)
    assert store_if_complete(settings, _key(2), made_now, made_after=started) is not None


def test_the_completion_budget_and_the_temperature_are_in_the_key() -> None:
    """A greedy evaluation under another completion budget is another evaluation, and one under a sampling
    temperature is never stored; at the values the stored evaluations were made under, the digest is the one they
    were stored with."""
    from webrl.store.evaluations import is_storable

    key = _key(3)
    assert key.max_new_tokens == 64 and key.temperature == 0.0
    shorter = key.model_copy(update={"max_new_tokens": 32})
    sampled = key.model_copy(update={"temperature": 0.7})
    assert len({key.digest(), shorter.digest(), sampled.digest()}) == 3
    assert is_storable(key) and is_storable(shorter) and not is_storable(sampled)
    before = {k: v for k, v in key.model_dump().items() if k not in ("max_new_tokens", "temperature")}
    assert key.digest() == hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()
