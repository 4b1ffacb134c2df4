"""What every evaluator looks at when an episode ends, and the interface they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from playwright.async_api import BrowserContext, Page

from webrl.config import Settings
from webrl.evaluation.judge import LLMJudge


@dataclass(frozen=True)
class EpisodeEnd:
    """The end state of an episode, as the evaluators see it.

    ``answer`` is the agent's ``exit(message=...)`` text ("" when it gave none, as WebArena's appended stop
    action); ``page_url`` the url of the agent's page; ``agent_page`` that page itself when the caller can
    hand it over (program_html reads a ``"last"`` target's live DOM from it, e.g. unsubmitted form values).
    """

    answer: str
    page_url: str
    intent: str
    settings: Settings
    context: BrowserContext | None = None
    agent_page: Page | None = None
    judge: LLMJudge | None = None


class SubEvaluator(Protocol):
    """One ``eval_types`` entry. ``score`` returns a value in [0, 1] (WebArena's are 0 or 1)."""

    name: str

    async def score(self, end: EpisodeEnd) -> float: ...
