"""Celery tasks of the actor (queue ``actor``): ``actor.act``, a batch of observations to actions with the
checkpoint ``WEBRL_ACTOR_MODEL`` (or the payload's ``model``) loaded in the worker process."""

from __future__ import annotations

import asyncio
from typing import Any

from services.actor.engine import ActorEngine
from webrl.config import get_settings
from webrl.models.actor_api import ActRequest
from webrl.models.policy import shared_backend
from webrl.queue import celery_app


@celery_app.task(name="actor.act")
def act(payload: dict[str, Any]) -> dict[str, Any]:
    """Payload: ``/v1/act``'s body plus optional ``"model"`` (a folder). Returns ``/v1/act``'s response.

    Pure inference: safe to run twice (greedy by default; a sampled run is seeded by ``seed`` when given).
    """
    settings = get_settings()
    body = dict(payload)
    model = body.pop("model", None) or settings.actor_model
    if not model:
        raise ValueError("actor.act needs a model: give 'model' in the payload or set WEBRL_ACTOR_MODEL")
    request = ActRequest.model_validate(body)
    backend = shared_backend(model, settings)
    engine = ActorEngine(settings, backend, backend.tokenizer, path=str(model))
    return asyncio.run(engine.act(request)).model_dump(mode="json")
