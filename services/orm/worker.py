"""Celery tasks of the ORM service (queue ``orm``)."""

from __future__ import annotations

import logging
from functools import lru_cache

from pydantic import BaseModel, Field, model_validator

from services.orm.scoring import OrmBackend, backend_from_settings, phase_trajectory_ids, score_stored
from webrl.config import get_settings
from webrl.db.session import session_scope
from webrl.hyperparams import DEFAULTS
from webrl.queue import celery_app
from webrl.schemas import Observation, Trajectory

log = logging.getLogger(__name__)


class ScorePayload(BaseModel):
    """``orm.score``: the trajectories by id, or every trajectory of a phase (and purpose)."""

    trajectory_ids: list[int] | None = None
    phase: int | None = None
    purpose: str = "train"
    orm: str | None = Field(None, description="ORM folder (or served name); default WEBRL_ORM_MODEL.")
    threshold: float = Field(DEFAULTS.reward.orm_threshold, ge=0.0, le=1.0, description="reward = 1 if p >= this.")

    @model_validator(mode="after")
    def _ids_or_phase(self) -> ScorePayload:
        if self.trajectory_ids is None and self.phase is None:
            raise ValueError("orm.score needs trajectory_ids or phase")
        return self


class StartState(BaseModel):
    """A task's first state, as ``rollout.observe`` returns it."""

    key: str
    intent: str
    observation: str


class StartValuePayload(BaseModel):
    """``orm.start_value``: P(YES) of tasks' start states, the critic's stand-in before phase 1 has one."""

    items: list[StartState] = Field(min_length=1)
    orm: str | None = None


@lru_cache(maxsize=2)
def _backend(path: str | None) -> OrmBackend:
    """One loaded ORM per worker process and path (loading is the expensive part)."""
    return backend_from_settings(get_settings(), path)


@celery_app.task(name="orm.score")
def score(payload: dict) -> dict:
    """Label trajectories with the ORM; returns ``{"orm_version", "trajectory_ids", "p", "rewards",
    "mean_reward"}``. Idempotent: labels are unique per (trajectory, ORM version)."""
    request = ScorePayload.model_validate(payload)
    settings = get_settings()
    threshold = request.threshold
    backend = _backend(request.orm)
    with session_scope(settings) as session:
        ids = request.trajectory_ids
        if ids is None:
            ids = phase_trajectory_ids(session, int(request.phase or 0), request.purpose)
        judgements = score_stored(session, backend, ids, threshold)
    rewards = [j.reward for j in judgements]
    log.info("orm.score: %d trajectories, mean reward %.3f", len(rewards), sum(rewards) / max(1, len(rewards)))
    return {"orm_version": backend.version, "trajectory_ids": list(ids), "p": [j.p for j in judgements],
            "rewards": rewards, "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0}


@celery_app.task(name="orm.start_value")
def start_value(payload: dict) -> dict:
    """The ORM's P(YES) for each task's start state (intent, no actions, the start page): the value the
    curriculum filter uses before the first critic exists. Returns ``{"orm_version", "values"}`` in input order;
    nothing is stored (it judges states, not trajectories)."""
    request = StartValuePayload.model_validate(payload)
    backend = _backend(request.orm)
    states = [Trajectory(task_id=item.key, intent=item.intent,
                         last_observation=Observation(html=item.observation, url=""))
              for item in request.items]
    return {"orm_version": backend.version, "values": backend.probabilities(states)}
