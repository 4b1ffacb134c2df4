"""Celery tasks of the browser pool (queue ``rollout``). Tasks only; the logic is in ``rollout.py``."""

from __future__ import annotations

import logging

from services.browser_pool.rollout import RolloutPayload, run_rollout, run_sync
from services.browser_pool.start_states import ObservePayload, observe_starts
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


@celery_app.task(name="rollout.observe")
def observe(payload: dict) -> dict:
    """Start states for the curriculum filter. Payload ``{"task_keys": [str], "concurrency": int}``; returns
    ``{"observations": {key: {"intent", "observation", "url"}}}``. Reads only; safe to run twice."""
    request = ObservePayload.model_validate(payload)
    states = run_sync(observe_starts(request, get_settings()))
    return {"observations": {key: state.model_dump() for key, state in states.items()}}
