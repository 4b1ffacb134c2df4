"""Celery tasks of the critic service (queue ``critic``)."""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Self

from pydantic import BaseModel, Field, model_validator

from services.critic.values import CriticScorer, State, start_observations
from webrl.config import get_settings
from webrl.db.repository import save_critic_values, tasks_by_keys
from webrl.db.session import session_scope
from webrl.queue import celery_app

log = logging.getLogger(__name__)


class StartState(BaseModel):
    """A task's first state, as ``rollout.observe`` returns it."""

    key: str
    intent: str
    observation: str


class ValuePayload(BaseModel):
    """``critic.value``: V(start state) of tasks, given as ``items`` (intent + start page, e.g. from
    ``rollout.observe``) or as ``task_keys`` (start pages from ``observations`` or stored episodes)."""

    items: list[StartState] | None = None
    task_keys: list[str] | None = None
    critic: str | None = Field(None, description="Saved critic folder; default WEBRL_CRITIC_MODEL.")
    observations: dict[str, str] = Field(default_factory=dict, description="Start page per task key, if known.")

    @model_validator(mode="after")
    def _items_or_keys(self) -> Self:
        if not self.items and not self.task_keys:
            raise ValueError("critic.value needs items or task_keys")
        return self


@lru_cache(maxsize=2)
def _scorer(path: str) -> CriticScorer:
    return CriticScorer(path, get_settings())


@celery_app.task(name="critic.value")
def value(payload: dict) -> dict:
    """Value each task's first state (round 0 of the actor prompt on its start page). Returns
    ``{"critic_version", "values": [V in input order], "by_key": {key: V}}``; values of stored tasks are kept
    in ``critic_values``, idempotent per (task, critic version)."""
    request = ValuePayload.model_validate(payload)
    settings = get_settings()
    path = request.critic or settings.critic_model
    if not path:
        raise ValueError("critic.value needs a critic path (payload 'critic' or WEBRL_CRITIC_MODEL)")
    scorer = _scorer(path)
    with session_scope(settings) as session:
        if request.items:
            keys = [item.key for item in request.items]
            states = [State(item.intent, item.observation) for item in request.items]
            tasks = tasks_by_keys(session, keys)
        else:
            keys = list(request.task_keys or [])
            tasks = tasks_by_keys(session, keys)
            unknown = sorted(set(keys) - {t.key for t in tasks})
            if unknown:
                raise KeyError(f"unknown task keys: {unknown}")
            pages = start_observations(session, tasks, request.observations)
            states = [State(t.intent, pages[t.key]) for t in tasks]
        values = scorer.values(states)
        by_key = dict(zip(keys, values, strict=True))
        save_critic_values(session, scorer.version, [(t.id, by_key[t.key]) for t in tasks])
    log.info("critic.value: %d states under %s", len(values), scorer.version)
    return {"critic_version": scorer.version, "values": values, "by_key": by_key}
