"""Celery tasks of the critic service (queue ``critic``). Tasks only; the operation is
:func:`services.critic.values.value`."""

from __future__ import annotations

from functools import lru_cache

from services.critic.values import CriticScorer, critic_path, value
from webrl.config import get_settings
from webrl.wire.contracts import ValueRequest
from webrl.wire.queue import celery_app


@lru_cache(maxsize=2)
def _scorer(path: str) -> CriticScorer:
    """One loaded critic per worker process and path (loading is the expensive part)."""
    return CriticScorer(path, get_settings())


@celery_app.task(name="critic.value")
def critic_value(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.ValueRequest` -> :class:`~webrl.wire.contracts.ValueResult`; values of stored
    tasks are kept in ``critic_values``, idempotent per (task, critic version)."""
    settings = get_settings()
    request = ValueRequest.model_validate(payload)
    return value(settings, request, _scorer(critic_path(settings, request))).model_dump(mode="json")
