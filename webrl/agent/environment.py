"""The environment the episode loop drives: one episode of one task, reset once, stepped with action text,
evaluated, closed.

Two implement it: the browser pool's episode on a leased Chromium (``services/browser_pool``) and, over
HTTP, an episode the actor service runs on the browser pool service (``services/actor``). The loop
(:func:`webrl.agent.episode_loop.run_episode`) never sees a browser; it sees these four calls and
:class:`EpisodeCrashed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from webrl.agent.actions import Action
from webrl.agent.schemas import Observation, TaskConfig

#: Stop reasons that say the machinery failed, not the agent: the browser died, its page's renderer crashed, a
#: browser call failed, or the task's site did not answer (its start URL did not open: a sites container
#: restarting, say). Such an episode is run again (:data:`services.browser_pool.runs.INFRASTRUCTURE_RETRIES`), one
#: that still ends so is never stored as an evaluation's result, and the trainer leaves it out of a phase's
#: experience: it is not the actor's behaviour.
INFRASTRUCTURE_STOPS = frozenset({"browser_crashed", "page_crashed", "browser_error", "site_unreachable"})


class EpisodeCrashed(Exception):
    """The browser or page under an episode died, or it could not start; the episode cannot go on. ``reason``
    names what happened (``browser_crashed``, ``page_crashed``, ``page_error``, ``browser_error``,
    ``site_unreachable``, ``start_url_refused``): the trajectory's stop reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class StepResult:
    """What one step did: the observation after it, the parsed action (None if it did not parse), errors."""

    observation: Observation
    action: Action | None
    parse_error: str | None = None
    error: str | None = None
    done: bool = False
    answer: str | None = None


class Environment(Protocol):
    """One episode of one task."""

    @property
    def task(self) -> TaskConfig:
        """The task with its ``__SITE__`` placeholders resolved (what a policy is shown)."""
        ...

    async def reset(self) -> Observation:
        """Open the episode (fresh state, the task's start pages) and return the first observation. On failure
        it frees what it took and raises; :meth:`close` is still safe to call."""
        ...

    async def step(self, text: str) -> StepResult:
        """Parse ``text`` as a WebRL action and carry it out. Returns the observation after it and what
        happened: a text that does not parse leaves the page as it is (``action`` None, ``parse_error`` set);
        an action that fails says why in ``error`` (the episode goes on); ``exit(...)`` returns ``done`` with
        its ``answer``. Raises :class:`EpisodeCrashed` when the episode cannot go on."""
        ...

    async def evaluate(self, answer: str | None) -> float | None:
        """The task's evaluator score (0..1) for ``answer`` on the current state; None when the task has no
        evaluator. Raises :class:`webrl.evaluation.harness_errors.EvaluationError` when its evaluator cannot run
        here."""
        ...

    async def close(self) -> None:
        """Free everything the episode holds. Safe to call twice, and after a failed or missing reset."""
        ...
