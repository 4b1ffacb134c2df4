"""Critic service: ``POST /v1/critic/value``. Routes only; the operation is :func:`services.critic.values.value`.

``uvicorn services.critic.app:app`` serves the critic folder named by ``WEBRL_CRITIC__MODEL`` (loaded on the
first request) or a request's ``critic``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, Request

from services.critic.values import CriticScorer, critic_path, value
from webrl.config import Settings, get_settings
from webrl.model_folders import written_stamp
from webrl.serving.factory import create_app, model_work
from webrl.serving.kept_models import KeptModels
from webrl.wire.contracts import ValueRequest, ValueResult


class LoadedCritics:
    """The loaded critics, each built on first use, one forward pass at a time."""

    def __init__(self, settings: Settings, scorer: CriticScorer | None = None) -> None:
        self.settings = settings
        self.default = scorer  # serves requests that name no critic (tests inject one)
        # a run names a new critic every phase; a folder republished in place is loaded again
        self.scorers: KeptModels[tuple[str, tuple[int, int, int] | None], CriticScorer] = KeptModels()
        self.lock = threading.Lock()

    def scorer(self, request: ValueRequest) -> CriticScorer:
        """The critic for ``request``: a preloaded one for the default, else loaded on first use and kept while it
        is among the most recently used (:class:`~webrl.serving.kept_models.KeptModels`), by folder and publication
        (:func:`~webrl.model_folders.written_stamp`)."""
        if request.critic is None and self.default is not None:
            return self.default
        path = critic_path(self.settings, request)
        key = (str(Path(path).resolve()), written_stamp(path))
        scorer = self.scorers.get(key, lambda: CriticScorer(path, self.settings))
        self.scorers.drop(lambda kept: kept[0] == key[0] and kept != key)  # its earlier publication's
        return scorer


def get_state(request: Request) -> LoadedCritics:
    return request.app.state.critic


StateDep = Annotated[LoadedCritics, Depends(get_state)]


def create_critic_app(settings: Settings | None = None, scorer: CriticScorer | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = create_app("critic", settings=settings, description="WebRL's critic: V(s) = P(success) of a state.",
                     batch_routes=("/v1/critic/value",))
    app.state.critic = LoadedCritics(settings, scorer)

    @app.post("/v1/critic/value", response_model=ValueResult, tags=["critic"])
    async def critic_value(body: ValueRequest, state: StateDep) -> ValueResult:
        """V(s) for a batch of states, or for the start states of stored tasks; values of stored tasks are kept."""
        return await model_work(state.settings, state.lock, lambda: value(state.settings, body, state.scorer(body)),
                                "critic values")

    return app


app = create_critic_app()
