"""Celery tasks of the actor (queue ``actor``): ``actor.act``, a batch of observations to actions with the
checkpoint ``WEBRL_ACTOR__MODEL`` (or the job's ``model``) loaded in the worker process. Tasks only; the logic is
:class:`services.actor.engine.ActorEngine`, as behind ``POST /v1/act``."""

from __future__ import annotations

import asyncio
from typing import Any

from services.actor.engine import ActorEngine
from webrl.config import get_settings
from webrl.models.model_policies import leased_backend
from webrl.serving.paths import requested_model_folder
from webrl.wire.contracts import ActJob, InvalidRequest
from webrl.wire.queue import celery_app


@celery_app.task(name="actor.act")
def act(payload: dict[str, Any]) -> dict[str, Any]:
    """:class:`~webrl.wire.contracts.ActJob` -> :class:`~webrl.wire.contracts.ActResponse`.

    Pure inference: safe to run twice (greedy by default; a sampled run is seeded by ``seed`` when given).
    """
    settings = get_settings()
    job = ActJob.model_validate(payload)
    model = job.model or settings.actor.model
    if not model:
        raise InvalidRequest("model", "actor.act needs a model: give 'model' or set WEBRL_ACTOR__MODEL")
    if job.model:  # a folder the payload names is loaded only where a request may name one (webrl.serving.paths)
        requested_model_folder(settings, job.model, "model", configured=settings.actor.model)
    with leased_backend(model, settings) as backend:
        engine = ActorEngine(settings, backend, backend.tokenizer, path=str(model))
        return asyncio.run(engine.act(job)).model_dump(mode="json")  # an ActJob is an ActRequest
