"""Build a WebArena evaluator from a task config and score the end of an episode with it.

WebArena (``evaluator_router`` / ``EvaluatorComb``): one evaluator per entry of ``eval.eval_types``, the
task's score is their product. Building resolves the ``__SITE__`` placeholders against the settings and
validates the whole block, so a bad config fails when it is loaded, not at the end of an episode.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from playwright.async_api import BrowserContext, Page

from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.evaluation.base import EpisodeEnd, SubEvaluator
from webrl.evaluation.harness_errors import EvaluatorBuildError
from webrl.evaluation.judge import LLMJudge
from webrl.evaluation.program_html import ProgramHtml
from webrl.evaluation.string_match import StringMatch
from webrl.evaluation.url_match import UrlMatch

logger = logging.getLogger(__name__)

EVAL_TYPES = ("string_match", "url_match", "program_html")


@dataclass(frozen=True)
class EvaluationResult:
    """The task score (product of the parts) and each part's score, in ``eval_types`` order.

    A part after a zero is not run (the product is already 0) and is absent from ``parts``.
    """

    score: float
    parts: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Evaluator:
    """The evaluator of one task."""

    task_id: str
    intent: str
    parts: tuple[SubEvaluator, ...]
    settings: Settings

    @property
    def eval_types(self) -> list[str]:
        return [part.name for part in self.parts]

    @property
    def needs_browser(self) -> bool:
        """Whether scoring opens pages (program_html); string/url matching needs only the answer and url."""
        return any(isinstance(part, ProgramHtml) for part in self.parts)

    async def score(
        self, answer: str | None, page_url: str, context: BrowserContext | None, agent_page: Page | None = None
    ) -> float:
        """The task score in [0, 1] for the agent's final ``answer`` and the url of its page.

        ``context`` is the episode's browser context: program_html opens its own page in it and never moves
        the agent's page. ``agent_page`` (optional) is the agent's page; when omitted, the context's page at
        ``page_url`` is used for ``"last"`` targets, read without navigating.
        """
        return (await self.evaluate(answer, page_url, context, agent_page)).score

    async def evaluate(
        self, answer: str | None, page_url: str, context: BrowserContext | None, agent_page: Page | None = None
    ) -> EvaluationResult:
        """:meth:`score` with each part's score."""
        end = EpisodeEnd(
            answer=answer or "",
            page_url=page_url,
            intent=self.intent,
            settings=self.settings,
            context=context,
            agent_page=agent_page or _find_page(context, page_url),
            judge=LLMJudge.from_settings(self.settings),
        )
        score, parts = 1.0, {}
        for part in self.parts:
            parts[part.name] = await part.score(end)
            score *= parts[part.name]
            if score == 0:
                break
        logger.info("task %s scored %.2f %s", self.task_id, score, parts)
        return EvaluationResult(score=score, parts=parts)


def build_evaluator(config: TaskConfig, settings: Settings) -> Evaluator:
    """The evaluator of ``config``'s ``eval`` block; :class:`EvaluatorBuildError` names what is unsupported."""
    if config.eval is None:
        raise EvaluatorBuildError(f"task {config.task_id} has no eval block")
    resolved = config.resolved(settings)
    spec = resolved.eval
    assert spec is not None
    if not spec.eval_types:
        raise EvaluatorBuildError(f"task {config.task_id}: eval.eval_types is empty")
    parts: list[SubEvaluator] = []
    for eval_type in spec.eval_types:
        try:
            if eval_type == "string_match":
                parts.append(StringMatch.from_spec(spec))
            elif eval_type == "url_match":
                parts.append(UrlMatch.from_spec(spec))
            elif eval_type == "program_html":
                parts.append(ProgramHtml.from_targets(spec.program_html))
            else:
                raise EvaluatorBuildError(f"unknown eval type {eval_type!r}; known: {EVAL_TYPES}")
        except EvaluatorBuildError as exc:
            raise EvaluatorBuildError(f"task {config.task_id}: {exc}") from exc
    return Evaluator(task_id=str(config.task_id), intent=config.intent, parts=tuple(parts), settings=settings)


def _find_page(context: BrowserContext | None, page_url: str) -> Page | None:
    """The context's (last opened) page showing ``page_url``: the agent's page, read but never moved."""
    if context is None:
        return None
    matches = [page for page in context.pages if not page.is_closed() and page.url == page_url]
    return matches[-1] if matches else None
