"""An embedded service keeps the statuses of its last finished jobs only (webrl.serving.finished_jobs)."""

from __future__ import annotations

import asyncio

import pytest

from webrl.serving.finished_jobs import FinishedJobs


def test_the_oldest_finished_status_goes_first() -> None:
    jobs: FinishedJobs[str] = FinishedJobs(size=2)
    for job_id in ("a", "b", "c"):
        jobs.add(job_id, f"{job_id} done")
    assert len(jobs) == 2 and "a" not in jobs and jobs.get("a") is None
    assert (jobs.get("b"), jobs.get("c")) == ("b done", "c done")
    jobs.add("b", "b again")  # a status recorded again counts as the newest
    jobs.add("d", "d done")
    assert "c" not in jobs and jobs.get("b") == "b again"


def test_a_record_keeps_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        FinishedJobs(size=0)


def test_the_browser_pools_embedded_jobs_are_bounded(settings, monkeypatch) -> None:
    """Embedded mode: a rollout job leaves the running jobs when it ends, and only the last statuses stay (the
    service kept every job it ever ran: one entry per rollout chunk for as long as it lived)."""
    from services.browser_pool import sessions
    from services.browser_pool.pool import BrowserPool
    from webrl.wire.contracts import RolloutRequest, RolloutResult

    async def rollout(payload, settings, pool):
        if payload.attempt % 2:
            raise RuntimeError("no such task")
        return RolloutResult(trajectory_ids=[payload.attempt], mean_env_score=1.0, n_scored=1, n_new=1)

    monkeypatch.setattr(sessions, "run_rollout", rollout)

    async def main() -> list:
        assert settings.eager  # the tests' settings configure no broker
        manager = sessions.EpisodeManager(settings, BrowserPool(settings))
        manager._finished_jobs = FinishedJobs(size=3)
        jobs = [await manager.submit(RolloutRequest(task_keys=["k"], phase=0, attempt=attempt,
                                                     policy={"kind": "oracle"}))
                for attempt in range(5)]
        await asyncio.gather(*manager._job_tasks)
        assert manager._running_jobs == {}
        return [await manager.job(job.job_id) for job in jobs]

    views = asyncio.run(main())
    assert views[:2] == [None, None]  # the two oldest let go
    assert [(v.status, v.error, v.result) for v in views[2:]] == [
        ("succeeded", None, {"trajectory_ids": [2], "mean_env_score": 1.0, "n_scored": 1, "n_new": 1}),
        ("failed", "RuntimeError: no such task", None),
        ("succeeded", None, {"trajectory_ids": [4], "mean_env_score": 1.0, "n_scored": 1, "n_new": 1}),
    ]
