"""rollout.run's logic: the early-stop thresholds of a rollout request reach the episode loop (a tiny actor with
random weights, nothing it writes parses, runs on a sandbox task in a real Chromium; its episodes stop after
as many parse failures in a row as the request says), a rollout is idempotent within its run only, and one that
fails part-way keeps the episodes it finished."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.browser_pool import rollout
from services.browser_pool.rollout import run_rollout
from webrl.agent.early_stop import MAX_PARSE_FAILURES
from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.sandbox.oracles import OraclePolicy
from webrl.wire.contracts import CheckpointSpec, OracleSpec, RolloutRequest

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


@pytest.fixture(scope="module")
def babbler(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webrl.models.tiny import build_tiny_folder

    corpus = ["Show me the products", "<html> <a id=\"3\"> Books </a> </html>"] * 20
    return build_tiny_folder(corpus, tmp_path_factory.mktemp("babbler") / "babbler", size="test", vocab_size=600)


async def test_max_parse_failures_of_the_request_stops_the_episode(sandbox, sandbox_tasks, stored_keys, babbler):
    keys = stored_keys(sandbox, sandbox_tasks[:1], prefix="stop-rules")
    request = RolloutRequest(task_keys=keys, phase=3, purpose="eval", policy=CheckpointSpec(path=str(babbler)),
                             max_steps=12, max_parse_failures=2)
    default = request.model_copy(update={"attempt": 1, "max_parse_failures": MAX_PARSE_FAILURES})
    stopped = {}
    for job in (request, default):
        result = await run_rollout(job, sandbox)
        with session_scope(sandbox) as s:
            row = s.get(m.TrajectoryRow, result.trajectory_ids[0])
            assert all(step.parse_error for step in row.steps)  # nothing the babbler writes is an action
            stopped[job.max_parse_failures] = (row.stop_reason, row.n_steps)
    assert stopped == {2: ("parse_failures", 2), MAX_PARSE_FAILURES: ("parse_failures", MAX_PARSE_FAILURES)}


async def test_a_chunk_is_idempotent_within_its_run_and_never_taken_from_another(sandbox, sandbox_tasks, stored_keys):
    keys = stored_keys(sandbox, sandbox_tasks[:1], prefix="run-scoped")
    first = RolloutRequest(task_keys=keys, phase=1, run_id=1, policy=OracleSpec(), max_steps=3)
    ran = await run_rollout(first, sandbox)
    again = await run_rollout(first, sandbox)
    assert ran.n_new == 1 and (again.n_new, again.trajectory_ids) == (0, ran.trajectory_ids)  # a resumed chunk
    other = await run_rollout(first.model_copy(update={"run_id": 2}), sandbox)
    assert other.n_new == 1 and other.trajectory_ids != ran.trajectory_ids  # run 2 rolls the task out itself
    with session_scope(sandbox) as s:
        assert [s.get(m.TrajectoryRow, i).run_id for i in (*ran.trajectory_ids, *other.trajectory_ids)] == [1, 2]


class GoesAwayAt:
    """The sandbox oracle until a request for ``intent``: then it fails as an actor service that went away does."""

    def __init__(self, intent: str) -> None:
        self.intent, self.oracle = intent, OraclePolicy()

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        if any(r.intent == self.intent for r in requests):
            raise ConnectionError("the actor service went away")
        return await self.oracle.act(requests)


async def test_a_rollout_that_fails_part_way_keeps_what_it_finished_and_its_retry_runs_the_rest(
        sandbox, sandbox_tasks, stored_keys, monkeypatch):
    tasks = list({t.intent: t for t in sandbox_tasks}.values())[:3]  # distinct intents: the third one fails
    keys = stored_keys(sandbox, tasks, prefix="part-way")
    request = RolloutRequest(task_keys=keys, phase=4, policy=OracleSpec(), max_steps=3, concurrency=1)
    monkeypatch.setattr(rollout, "policy_from_spec", lambda spec, settings: GoesAwayAt(tasks[2].intent))
    with pytest.raises(ConnectionError, match="went away"):
        await run_rollout(request, sandbox)
    with session_scope(sandbox) as s:
        kept = s.query(m.TrajectoryRow).join(m.Task).filter(m.Task.key.in_(keys), m.TrajectoryRow.phase == 4).all()
        assert sorted(t.task.key for t in kept) == sorted(keys[:2])  # one at a time: the first two had ended
        kept_ids = {t.id for t in kept}
    monkeypatch.undo()
    retry = await run_rollout(request, sandbox)
    assert retry.n_new == 1 and set(retry.trajectory_ids[:2]) == kept_ids
