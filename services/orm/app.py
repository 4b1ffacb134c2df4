"""ORM service: ``POST /v1/orm/score``. Routes only; the logic is in :mod:`services.orm.scoring`.

``uvicorn services.orm.app:app`` serves the ORM named by ``WEBRL_ORM_MODEL`` (loaded on the first request).
"""

from __future__ import annotations

import threading
from typing import Annotated, Self

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, model_validator

from services.orm.scoring import (
    Judgement,
    OrmBackend,
    UnknownTrajectoriesError,
    backend_from_settings,
    judge,
    score_stored,
)
from webrl.config import Settings, get_settings
from webrl.db.session import session_scope
from webrl.hyperparams import DEFAULTS
from webrl.schemas import Trajectory
from webrl.service import create_app

MAX_ITEMS = 256  # trajectories per request: bounds one request's memory and latency
DB_MAX_ID = 2**63 - 1  # a database id is a signed 64-bit integer (SQLite and Postgres BIGINT)


class ScoreRequest(BaseModel):
    """Either full trajectories (judged, not stored) or ids of stored ones (judged, labels stored)."""

    trajectories: list[Trajectory] | None = Field(None, max_length=MAX_ITEMS)
    trajectory_ids: list[Annotated[int, Field(ge=1, le=DB_MAX_ID)]] | None = Field(None, max_length=MAX_ITEMS)
    threshold: float = Field(DEFAULTS.reward.orm_threshold, ge=0.0, le=1.0, description="reward = 1 if p >= this.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [name for name in ("trajectories", "trajectory_ids") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError("give exactly one non-empty list: trajectories or trajectory_ids")
        return self


class ScoreItem(BaseModel):
    trajectory_id: int | None = None
    p: float = Field(description="P(YES) = softmax(logit_YES, logit_NO)[YES]")
    reward: float = Field(description="1 if p >= threshold else 0")


class ScoreResponse(BaseModel):
    orm_version: str
    threshold: float
    results: list[ScoreItem]


class OrmState:
    """The loaded ORM, built on first use and shared by requests (one forward pass at a time)."""

    def __init__(self, settings: Settings, backend: OrmBackend | None = None) -> None:
        self.settings = settings
        self._backend = backend
        self.lock = threading.Lock()

    @property
    def backend(self) -> OrmBackend:
        """The ORM; 503 when none is configured."""
        if self._backend is None:
            try:
                self._backend = backend_from_settings(self.settings)
            except ValueError as exc:
                raise HTTPException(status_code=503, detail=str(exc)) from exc
        return self._backend


def get_state(request: Request) -> OrmState:
    return request.app.state.orm


StateDep = Annotated[OrmState, Depends(get_state)]


def _response(backend: OrmBackend, threshold: float, judgements: list[Judgement]) -> ScoreResponse:
    items = [ScoreItem(trajectory_id=j.trajectory_id, p=j.p, reward=j.reward) for j in judgements]
    return ScoreResponse(orm_version=backend.version, threshold=threshold, results=items)


def create_orm_app(settings: Settings | None = None, backend: OrmBackend | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = create_app("orm", settings=settings, description="Outcome reward model: P(YES) that a trajectory succeeded.")
    app.state.orm = OrmState(settings, backend)

    @app.post("/v1/orm/score", response_model=ScoreResponse, tags=["orm"])
    def score(body: ScoreRequest, state: StateDep) -> ScoreResponse:
        """Judge trajectories: p = P(YES), reward = 1[p >= threshold]. Labels of stored ones are kept."""
        threshold = body.threshold
        with state.lock:
            backend = state.backend
            if body.trajectories:
                return _response(backend, threshold, judge(backend, body.trajectories, threshold))
            try:
                with session_scope(state.settings) as session:
                    judgements = score_stored(session, backend, body.trajectory_ids or [], threshold)
            except UnknownTrajectoriesError as exc:
                raise HTTPException(status_code=404, detail=str(exc)) from exc
        return _response(backend, threshold, judgements)

    return app


app = create_orm_app()
