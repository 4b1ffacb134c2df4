"""Celery tasks of the ORM service (queue ``orm``). Tasks only; the operations are in
:mod:`services.orm.scoring`."""

from __future__ import annotations

from functools import lru_cache

from services.orm.scoring import OrmBackend, backend_from_settings, backend_key, score, start_value
from webrl.config import get_settings
from webrl.wire.contracts import ScoreRequest, StartValueRequest
from webrl.wire.queue import celery_app


@lru_cache(maxsize=2)
def _loaded(path: str | None, written: tuple[int, int, int] | None) -> OrmBackend:
    """One loaded ORM per worker process, path and publication (loading is the expensive part)."""
    return backend_from_settings(get_settings(), path)


def _backend(path: str | None) -> OrmBackend:
    """The ORM a request names, loaded again when its folder was republished (:func:`backend_key`)."""
    return _loaded(*backend_key(get_settings(), path))


@celery_app.task(name="orm.score")
def orm_score(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.ScoreRequest` -> :class:`~webrl.wire.contracts.ScoreResult`. Idempotent: labels are
    unique per (trajectory, ORM version)."""
    request = ScoreRequest.model_validate(payload)
    return score(get_settings(), request, _backend(request.orm)).model_dump(mode="json")


@celery_app.task(name="orm.start_value")
def orm_start_value(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.StartValueRequest` -> :class:`~webrl.wire.contracts.StartValueResult`; stores
    nothing."""
    request = StartValueRequest.model_validate(payload)
    return start_value(request, _backend(request.orm)).model_dump(mode="json")
