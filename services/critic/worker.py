"""Celery tasks of the critic service (queue ``critic``). Tasks only; the operation is
:func:`services.critic.values.value`."""

from __future__ import annotations

from functools import lru_cache

from services.critic.values import CriticScorer, critic_path, value
from webrl.config import get_settings
from webrl.model_folders import written_stamp
from webrl.wire.contracts import ValueRequest
from webrl.wire.queue import celery_app


@lru_cache(maxsize=2)
def _loaded(path: str, written: tuple[int, int, int] | None) -> CriticScorer:
    """One loaded critic per worker process, path and publication (loading is the expensive part)."""
    return CriticScorer(path, get_settings())


def _scorer(path: str) -> CriticScorer:
    """The critic at ``path``, loaded again when its folder was republished (a configured ``WEBRL_CRITIC__MODEL``
    or a phase's fixed ``critic_output`` written anew: :func:`~webrl.model_folders.written_stamp`)."""
    return _loaded(path, written_stamp(path))


@celery_app.task(name="critic.value")
def critic_value(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.ValueRequest` -> :class:`~webrl.wire.contracts.ValueResult`; values of stored
    tasks are kept in ``critic_values``, idempotent per (task, critic version)."""
    settings = get_settings()
    request = ValueRequest.model_validate(payload)
    return value(settings, request, _scorer(critic_path(settings, request))).model_dump(mode="json")
