"""Critic values: V(s) = min of the two heads' P(success) (``webrl.models.critic.critic_value``) for states
(intent, observation, history).

WebRL filters generated tasks by the critic's value of the task's first state: round 0 of the actor prompt on
the site's start page (``filter_by_critic`` in WebRL's scripts/gen_task.py reads one stored page per site; keep
the task when V lies in the band of ``webrl.method.hyperparams.Curriculum``). :func:`start_observations` finds that page
for a task in the database: the first observation of a stored episode of the same task, else of a task with the
same start URL, else of any task on the same site.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.repository import save_critic_values, tasks_by_keys
from webrl.db.session import session_scope
from webrl.models.critic import CriticModel, check_saved_critic, critic_prompt, critic_values
from webrl.serving.paths import requested_model_folder
from webrl.wire.contracts import InvalidRequest, NotServing, ValueRequest, ValueResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class State:
    """What the critic reads: the task's intent, the page, and the responses of earlier steps."""

    intent: str
    observation: str
    history: Sequence[str] = field(default_factory=tuple)


class CriticScorer:
    """A saved :class:`~webrl.models.critic.CriticModel` and its tokenizer, ready to value states."""

    def __init__(self, path: str | Path, settings: Settings) -> None:
        from webrl.models.loading import checkpoint_version, load_tokenizer, torch_dtype

        dtype = torch_dtype(settings)
        self.model = CriticModel.from_pretrained(path, dtype=None if dtype == "auto" else dtype)
        self.model.to(settings.models.device)
        self.model.eval()
        self.tokenizer = load_tokenizer(path, settings)
        self.version = checkpoint_version(path)
        self.batch_size = settings.critic.batch_size
        context = getattr(self.model.config, "max_position_embeddings", None) or settings.critic.max_prompt_tokens
        self.max_tokens = min(settings.critic.max_prompt_tokens, int(context))

    def prompts(self, states: Sequence[State]) -> list[str]:
        return [critic_prompt(self.tokenizer, s.intent, s.observation, list(s.history), max_tokens=self.max_tokens)
                for s in states]

    def values(self, states: Sequence[State], batch_size: int | None = None) -> list[float]:
        """V = min(V_1, V_2) per state."""
        return critic_values(self.model, self.tokenizer, self.prompts(states), batch_size=batch_size or self.batch_size)


class MissingStartPageError(InvalidRequest):
    def __init__(self, keys: Sequence[str]) -> None:
        super().__init__("task_keys", f"no stored start page for tasks {list(keys)}: run an episode on their site "
                         "first or pass their observations")
        self.keys = list(keys)


def _first_observation(session: Session, *conditions: object) -> str | None:
    query = (select(m.StepRow.observation).join(m.TrajectoryRow, m.StepRow.trajectory_id == m.TrajectoryRow.id)
             .join(m.Task, m.TrajectoryRow.task_id == m.Task.id).where(m.StepRow.index == 0, *conditions)
             .order_by(m.StepRow.id.desc()).limit(1))
    observation = session.scalar(query)
    return str(observation.get("html", "")) if observation else None


def start_observation(session: Session, task: m.Task) -> str | None:
    """The start page of ``task`` from stored episodes: same task, else same start URL, else same site."""
    start_url = (task.config or {}).get("start_url")
    found = _first_observation(session, m.Task.id == task.id)
    if found is None and start_url:
        same_url = [t.id for t in session.scalars(select(m.Task).where(m.Task.site == task.site))
                    if (t.config or {}).get("start_url") == start_url]
        found = _first_observation(session, m.Task.id.in_(same_url)) if same_url else None
    if found is None:
        found = _first_observation(session, m.Task.site == task.site)
    return found


def start_observations(session: Session, tasks: Sequence[m.Task], given: dict[str, str] | None = None
                       ) -> dict[str, str]:
    """Task key -> start page HTML (``given`` first); raises naming every task without one."""
    given = given or {}
    pages: dict[str, str] = {}
    missing = []
    for task in tasks:
        page = given.get(task.key) or start_observation(session, task)
        if page is None:
            missing.append(task.key)
        else:
            pages[task.key] = page
    if missing:
        raise MissingStartPageError(missing)
    return pages


# ---- the operation: ``critic.value`` and ``POST /v1/critic/value`` ---------------------------------------
def critic_path(settings: Settings, request: ValueRequest) -> str:
    """The critic folder a request is valued with: its own, else ``WEBRL_CRITIC__MODEL``."""
    if request.critic is not None:
        folder = requested_model_folder(settings, request.critic, "critic", configured=settings.critic.model)
        check_saved_critic(folder, "critic", request.critic)
        return request.critic
    if not settings.critic.model:
        raise NotServing("no critic model: set WEBRL_CRITIC__MODEL to a saved critic folder or give 'critic'")
    return str(settings.critic.model)


def _states(session: Session, request: ValueRequest) -> tuple[list[State], list[str | None]]:
    """The states to value and their task keys (None for an unkeyed state)."""
    if request.states is not None:
        return ([State(s.intent, s.observation, tuple(s.history)) for s in request.states],
                [s.key for s in request.states])
    keys = list(request.task_keys or [])
    tasks = tasks_by_keys(session, keys)
    unknown = sorted(set(keys) - {t.key for t in tasks})
    if unknown:
        raise InvalidRequest("task_keys", f"unknown task keys: {unknown}")
    pages = start_observations(session, tasks, request.observations)
    by_key = {t.key: t for t in tasks}
    return [State(by_key[k].intent, pages[k]) for k in keys], list(keys)


def value(settings: Settings, request: ValueRequest, scorer: CriticScorer) -> ValueResult:
    """V of each state (in request order); values of stored tasks are kept in ``critic_values``, idempotent per
    (task, critic version)."""
    with session_scope(settings) as session:
        states, keys = _states(session, request)
        values = scorer.values(states)
        by_key = {k: v for k, v in zip(keys, values, strict=True) if k is not None}
        stored = tasks_by_keys(session, list(by_key))
        save_critic_values(session, scorer.version, [(t.id, by_key[t.key]) for t in stored])
    log.info("critic.value: %d states under %s", len(values), scorer.version)
    return ValueResult(critic_version=scorer.version, values=values, by_key=by_key)
