"""Celery tasks of the browser pool (queue ``rollout``). Tasks only; the logic is in ``rollout.py``."""

from __future__ import annotations

import logging

from services.browser_pool.rollout import RolloutPayload, run_rollout, run_sync
from webrl.config import get_settings
from webrl.queue import celery_app

log = logging.getLogger(__name__)


@celery_app.task(name="rollout.run")
def run(payload: dict) -> dict:
    """Run a policy on stored tasks and store the trajectories.

    Payload: ``{"task_keys": [str], "phase": int, "attempt": int, "purpose": "train"|"eval"|"sft"|"orm",
    "policy": {...spec}, "concurrency": int}``. Returns ``{"trajectory_ids": [int], "mean_env_score": float,
    "n_scored": int, "n_new": int}``. Idempotent per (task, phase, attempt): a re-run stores nothing twice.
    Unknown task keys fail the task with a message naming them.
    """
    request = RolloutPayload.model_validate(payload)
    log.info("rollout.run: %d tasks, phase %d, attempt %d, policy %s", len(request.task_keys), request.phase,
             request.attempt, request.policy.get("kind"))
    return run_sync(run_rollout(request, get_settings())).model_dump()
