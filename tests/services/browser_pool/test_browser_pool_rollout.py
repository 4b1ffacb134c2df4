"""rollout.run's logic: the early-stop thresholds of a rollout request reach the episode loop (a tiny actor with
random weights, nothing it writes parses, runs on a sandbox task in a real Chromium; its episodes stop after
as many parse failures in a row as the request says), and a rollout is idempotent within its run only."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.browser_pool.rollout import run_rollout
from webrl.contracts import CheckpointSpec, OracleSpec, RolloutRequest
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.early_stop import MAX_PARSE_FAILURES

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
            row = s.get(m.Trajectory, result.trajectory_ids[0])
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
        assert [s.get(m.Trajectory, i).run_id for i in (*ran.trajectory_ids, *other.trajectory_ids)] == [1, 2]
