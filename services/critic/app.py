"""Critic service: ``POST /v1/critic/value``. Routes only; the logic is in :mod:`services.critic.values`.

``uvicorn services.critic.app:app`` serves the critic folder named by ``WEBRL_CRITIC_MODEL`` (loaded on the
first request).
"""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

from services.critic.values import CriticScorer, State
from webrl.config import Settings, get_settings
from webrl.service import create_app

MAX_ITEMS = 256  # states per request


class StateIn(BaseModel):
    intent: str = Field(min_length=1, description="The task's intent.")
    observation: str = Field(description="Simplified HTML of the page (WebRL's observation).")
    history: list[str] = Field(default_factory=list, description="Raw responses of the earlier steps, oldest first.")


class ValueRequest(BaseModel):
    states: list[StateIn] = Field(min_length=1, max_length=MAX_ITEMS)


class ValueResponse(BaseModel):
    critic_version: str
    values: list[float] = Field(description="V = min(softmax(head1)[1], softmax(head2)[1]) per state")


class CriticState:
    """The loaded critic, built on first use, one forward pass at a time."""

    def __init__(self, settings: Settings, scorer: CriticScorer | None = None) -> None:
        self.settings = settings
        self._scorer = scorer
        self.lock = threading.Lock()

    @property
    def scorer(self) -> CriticScorer:
        """The critic; 503 when none is configured."""
        if self._scorer is None:
            if not self.settings.critic_model:
                raise HTTPException(status_code=503,
                                    detail="no critic model: set WEBRL_CRITIC_MODEL to a saved critic folder")
            self._scorer = CriticScorer(self.settings.critic_model, self.settings)
        return self._scorer


def get_state(request: Request) -> CriticState:
    return request.app.state.critic


StateDep = Annotated[CriticState, Depends(get_state)]


def create_critic_app(settings: Settings | None = None, scorer: CriticScorer | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = create_app("critic", settings=settings, description="WebRL's critic: V(s) = P(success) of a state.")
    app.state.critic = CriticState(settings, scorer)

    @app.post("/v1/critic/value", response_model=ValueResponse, tags=["critic"])
    def value(body: ValueRequest, state: StateDep) -> ValueResponse:
        """V(s) for a batch of states (intent, observation, history)."""
        states = [State(s.intent, s.observation, tuple(s.history)) for s in body.states]
        with state.lock:
            scorer = state.scorer
            values = scorer.values(states)
        return ValueResponse(critic_version=scorer.version, values=values)

    return app


app = create_critic_app()
