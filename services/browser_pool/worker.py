"""Celery tasks of the browser pool (queue ``rollout``). Tasks only; the logic is in ``rollout.py``,
``start_states.py`` and ``page_check.py``; the contracts in :mod:`webrl.wire.contracts`."""

from __future__ import annotations

import logging

from services.browser_pool.page_check import check_pages as check
from services.browser_pool.rollout import run_rollout, run_sync
from services.browser_pool.start_states import observe_starts
from webrl.config import get_settings
from webrl.wire.contracts import ObserveRequest, PageCheckRequest, RolloutRequest
from webrl.wire.queue import celery_app

log = logging.getLogger(__name__)


@celery_app.task(name="rollout.run")
def run(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.RolloutRequest` -> :class:`~webrl.wire.contracts.RolloutResult`: run a policy on
    stored tasks and store the trajectories. Idempotent per (task, phase, attempt, run): a re-run stores nothing twice.
    Unknown task keys fail the task with a message naming them."""
    request = RolloutRequest.model_validate(payload)
    log.info("rollout.run: %d tasks, phase %d, attempt %d, run %d, policy %s", len(request.task_keys),
             request.phase, request.attempt, request.run_id, request.policy.kind)
    return run_sync(run_rollout(request, get_settings())).model_dump(mode="json")


@celery_app.task(name="rollout.observe")
def observe(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.ObserveRequest` -> :class:`~webrl.wire.contracts.ObserveResult`: the start states
    of stored tasks, for the curriculum filter. Reads only; safe to run twice."""
    return run_sync(observe_starts(ObserveRequest.model_validate(payload), get_settings())).model_dump(mode="json")


@celery_app.task(name="rollout.check_pages")
def check_pages(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.PageCheckRequest` -> :class:`~webrl.wire.contracts.PageCheckResult`: the first
    observation of each URL with timings (``webrl pages check``). Reads only; safe to run twice. A URL off the
    allow-list fails the task with a message naming it."""
    return run_sync(check(PageCheckRequest.model_validate(payload), get_settings())).model_dump(mode="json")
