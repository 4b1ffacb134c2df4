"""ORM service: ``POST /v1/orm/score``. Routes only; the operation is :func:`services.orm.scoring.score`.

``uvicorn services.orm.app:app`` serves the ORM named by ``WEBRL_ORM__MODEL`` (loaded on the first request) or
a request's ``orm``.
"""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request

from services.orm.scoring import OrmBackend, UnknownTrajectoriesError, backend_from_settings, backend_key, score
from webrl.config import Settings, get_settings
from webrl.serving.factory import create_app, model_work
from webrl.serving.kept_models import KeptModels
from webrl.wire.contracts import ScoreRequest, ScoreResult


class OrmState:
    """The loaded ORMs, each built on first use and shared by requests (one forward pass at a time)."""

    def __init__(self, settings: Settings, backend: OrmBackend | None = None) -> None:
        self.settings = settings
        self.default = backend  # serves requests that name no ORM (tests inject one)
        self.backends: KeptModels[tuple[str | None, tuple[int, int, int] | None], OrmBackend] = KeptModels()
        self.lock = threading.Lock()

    def backend(self, request: ScoreRequest) -> OrmBackend:
        """The ORM for ``request``; :class:`~webrl.wire.contracts.NotServing` (503) when none is configured."""
        if request.orm is None and self.default is not None:
            return self.default
        key = backend_key(self.settings, request.orm)  # a folder republished in place is loaded again
        backend = self.backends.get(key, lambda: backend_from_settings(self.settings, request.orm))
        self.backends.drop(lambda kept: kept[0] == request.orm and kept != key)  # its earlier publication's
        return backend


def get_state(request: Request) -> OrmState:
    return request.app.state.orm


StateDep = Annotated[OrmState, Depends(get_state)]


def create_orm_app(settings: Settings | None = None, backend: OrmBackend | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = create_app("orm", settings=settings, description="Outcome reward model: P(YES) that a trajectory succeeded.",
                     batch_routes=("/v1/orm/score",))
    app.state.orm = OrmState(settings, backend)

    @app.post("/v1/orm/score", response_model=ScoreResult, tags=["orm"])
    async def orm_score(body: ScoreRequest, state: StateDep) -> ScoreResult:
        """Judge trajectories: p = P(YES), reward = 1[p >= threshold]. Labels of stored ones are kept."""
        try:
            return await model_work(state.settings, state.lock,
                                    lambda: score(state.settings, body, state.backend(body)), "ORM scoring")
        except UnknownTrajectoriesError as exc:
            raise HTTPException(status_code=404, detail=str(exc)) from exc

    return app


app = create_orm_app()
