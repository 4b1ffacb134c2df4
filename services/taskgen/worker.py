"""taskgen Celery tasks: ``taskgen.generate`` and ``taskgen.filter``. Tasks only; the operations are in
:mod:`services.taskgen.curriculum`."""

from __future__ import annotations

from services.taskgen.curriculum import filter_tasks, generate
from webrl.config import get_settings
from webrl.wire.contracts import FilterRequest, GenerateRequest
from webrl.wire.queue import celery_app


@celery_app.task(name="taskgen.generate")
def tasks_generate(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.GenerateRequest` -> :class:`~webrl.wire.contracts.GenerateResult`; idempotent."""
    return generate(get_settings(), GenerateRequest.model_validate(payload)).model_dump(mode="json")


@celery_app.task(name="taskgen.filter")
def tasks_filter(payload: dict) -> dict:
    """:class:`~webrl.wire.contracts.FilterRequest` -> :class:`~webrl.wire.contracts.FilterResult`; idempotent."""
    return filter_tasks(get_settings(), FilterRequest.model_validate(payload)).model_dump(mode="json")
