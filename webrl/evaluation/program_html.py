"""``program_html``: contents of pages after the episode, checked target by target.

WebArena (``HTMLContentEvaluator``), for each target in order, multiplying the scores:
1. url: ``"last"`` reads the page as it is; a fixed url, or ``func:<helper>(...)`` returning one
   (``__last_url__`` = the current page's url), is opened first.
2. locator: empty -> the whole page HTML; ``document.``/``[...document.`` -> that JavaScript expression
   (after running ``prep_actions``; an error reads as ""; the value is converted with Python ``str``, so
   ``null`` reads "None" and ``true`` reads "True"); ``func:`` -> a helper (:mod:`helpers`);
   ``lambda:`` (VisualWebArena) -> JavaScript evaluated as is, a falsy result scores the task 0.
3. the selection is HTML-unescaped and checked with the first of ``exact_match``, ``must_include``
   (`` |OR| `` alternatives, substring), ``must_exclude``, ``fuzzy_match`` (WebArena-Lite: the references
   joined by ", " and judged once) present in ``required_contents``.

Where it reads: the agent's own page, live, until a target navigates (so ``"last"`` sees unsubmitted
form values, as in WebArena) and never navigates that page; every navigation happens on a page of its own
in the same browser context (same cookies, so the same sandbox episode and login), closed at the end.
That page only opens URLs on the allow-list and follows no redirect off it (a
:class:`~webrl.safety.navigation_guard.NavigationGuard` on it); either is an :class:`EvaluationError`.
"""

from __future__ import annotations

import asyncio
import html
import logging
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from webrl.evaluation.base import EpisodeEnd
from webrl.evaluation.harness_errors import EvaluationError, EvaluatorBuildError
from webrl.evaluation.helpers import HelperCall, HelperContext
from webrl.evaluation.judge import require_judge
from webrl.evaluation.string_rules import exact_match, must_exclude, must_include_any
from webrl.safety.allow_list import is_allowed
from webrl.safety.navigation_guard import NavigationGuard

logger = logging.getLogger(__name__)

LAST = "last"
#: WebArena's ``elif`` order: the first of these keys present in ``required_contents`` is the check.
CHECK_KINDS = ("exact_match", "must_include", "must_exclude", "fuzzy_match")
LocatorKind = Literal["page", "js", "lambda", "func"]


@dataclass(frozen=True)
class Locator:
    kind: LocatorKind
    code: str = ""
    call: HelperCall | None = None

    @classmethod
    def parse(cls, text: str) -> Locator:
        if not text.strip():
            return cls("page")
        if text.startswith(("document.", "[...document.")):
            return cls("js", text)
        if text.startswith("lambda:"):
            return cls("lambda", text.removeprefix("lambda:"))
        if text.startswith("func:"):
            return cls("func", text, HelperCall.parse(text))
        raise EvaluatorBuildError(
            f"program_html: unknown locator {text[:80]!r}; expected '', 'document.…', 'lambda:…' or 'func:…'"
        )


@dataclass(frozen=True)
class Check:
    kind: str
    value: str | tuple[str, ...]

    @classmethod
    def parse(cls, contents: dict[str, Any]) -> Check:
        kind = next((k for k in CHECK_KINDS if k in contents), None)
        if kind is None:
            raise EvaluatorBuildError(f"program_html: required_contents {sorted(contents)} has none of {CHECK_KINDS}")
        value = contents[kind]
        if kind == "exact_match":
            if isinstance(value, list | dict) or value is None:
                raise EvaluatorBuildError("program_html exact_match must be one string")
            return cls(kind, str(value))
        if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
            raise EvaluatorBuildError(f"program_html {kind} must be a list of strings")
        return cls(kind, tuple(str(v) for v in value))


@dataclass(frozen=True)
class Target:
    url: str | HelperCall
    locator: Locator
    check: Check
    prep_actions: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Target:
        for key in ("url", "locator", "required_contents"):
            if key not in raw:
                raise EvaluatorBuildError(f"program_html target lacks {key!r}: {raw}")
        url = str(raw["url"])
        if url.startswith("func"):
            target_url: str | HelperCall = HelperCall.parse(url)
        elif url == LAST or urlparse(url).scheme:
            target_url = url
        else:
            raise EvaluatorBuildError(f"program_html: url {url!r} is not 'last', a func: call or an absolute url")
        prep = raw.get("prep_actions") or []
        if not isinstance(prep, list):
            raise EvaluatorBuildError("program_html prep_actions must be a list of JavaScript statements")
        return cls(target_url, Locator.parse(str(raw["locator"])), Check.parse(raw["required_contents"]), tuple(prep))


class _Pages:
    """The page being checked: the agent's live page until a target navigates, then one of our own."""

    def __init__(self, end: EpisodeEnd) -> None:
        self.end = end
        agent = end.agent_page
        self.current: Page | None = agent if agent is not None and not agent.is_closed() else None
        self.own: Page | None = None
        self.blocked: list[str] = []  # navigations of our own page to hosts off the allow-list (none got there)

    @property
    def url(self) -> str:
        return self.current.url if self.current is not None else self.end.page_url

    async def page(self) -> Page:
        if self.current is None:
            await self.goto(self.end.page_url)
        assert self.current is not None
        return self.current

    async def goto(self, url: str) -> Page:
        if self.end.context is None:
            raise EvaluationError("program_html needs a browser context to open its own page")
        settings = self.end.settings
        allowed = settings.host_allow_list()
        if not is_allowed(url, allowed):
            raise EvaluationError(f"program_html will not open {url}: its host is not on the allow-list {allowed}")
        if self.own is None:
            self.own = await self.end.context.new_page()
            await NavigationGuard.on_page(self.own, allowed, self._blocked)
        try:
            await self.own.goto(url, wait_until="load", timeout=settings.evaluation.nav_timeout_s * 1000)
        except PlaywrightError as exc:
            if self.blocked:
                raise EvaluationError(f"program_html: {url} redirected to {self.blocked[-1]}, whose host is not "
                                      f"on the allow-list {allowed}") from None
            raise EvaluationError(f"program_html could not open {url}: {exc.message}") from exc
        if settings.evaluation.settle_s:
            await asyncio.sleep(settings.evaluation.settle_s)
        self.current = self.own
        return self.own

    def _blocked(self, url: str, is_document: bool) -> None:
        """The guard failed a hop; a document's explains a failed goto (a subresource's leaves the page loading)."""
        if is_document:
            self.blocked.append(url)

    async def close(self) -> None:
        if self.own is not None and not self.own.is_closed():
            await self.own.close()


@dataclass(frozen=True)
class ProgramHtml:
    """A built ``program_html`` check."""

    targets: tuple[Target, ...]
    name: str = "program_html"

    @classmethod
    def from_targets(cls, targets: list[dict[str, Any]]) -> ProgramHtml:
        if not targets:
            raise EvaluatorBuildError("program_html needs a non-empty eval.program_html list")
        return cls(tuple(Target.parse(t) for t in targets))

    async def score(self, end: EpisodeEnd) -> float:
        pages = _Pages(end)
        score = 1.0
        try:
            for target in self.targets:
                selected = await self._select(target, pages, end)
                if selected is None:  # a lambda: locator found nothing: the page is wrong
                    return 0.0
                score *= await _check(target.check, selected, end)
                if score == 0:  # the product stays zero; skip the remaining navigations
                    break
        finally:
            await pages.close()
        return score

    async def _select(self, target: Target, pages: _Pages, end: EpisodeEnd) -> str | None:
        """Open the target's page and return the located content (None: a falsy ``lambda:`` result)."""
        url = target.url
        if isinstance(url, HelperCall):
            url = str(await url.call(HelperContext(end.settings, end.context, pages.current), last_url=pages.url))
        page = await pages.page() if url == LAST else await pages.goto(url)
        locator = target.locator
        if locator.kind == "page":
            value: Any = await page.content()
        elif locator.kind == "js":
            value = await _run_js(page, locator.code, target.prep_actions)
        elif locator.kind == "lambda":
            value = await _run_lambda(page, locator.code)
        else:
            assert locator.call is not None
            value = await locator.call.call(HelperContext(end.settings, end.context, page), last_url=page.url)
        if value is None:
            return None
        return html.unescape(value if isinstance(value, str) else str(value))


async def _run_js(page: Page, expression: str, prep_actions: tuple[str, ...]) -> str:
    """WebArena: run the prep actions (stop silently at the first failure), then ``str`` of the expression."""
    try:
        for action in prep_actions:
            await page.evaluate(f"() => {action}")
    except PlaywrightError as exc:
        logger.debug("prep action failed on %s: %s", page.url, exc.message)
    try:
        return str(await page.evaluate(f"() => {expression}"))
    except PlaywrightError as exc:
        logger.debug("locator failed on %s: %s", page.url, exc.message)
        return ""


async def _run_lambda(page: Page, code: str) -> Any:
    """VisualWebArena: the JavaScript after ``lambda:`` is evaluated in the page; falsy or failing -> None."""
    try:
        value = await page.evaluate(code)
    except PlaywrightError as exc:
        logger.debug("lambda locator failed on %s: %s", page.url, exc.message)
        return None
    return value if value else None


async def _check(check: Check, selected: str, end: EpisodeEnd) -> float:
    if check.kind == "exact_match":
        assert isinstance(check.value, str)
        return exact_match(check.value, selected)
    if check.kind == "must_include":
        return _product(must_include_any(phrase, selected) for phrase in check.value)
    if check.kind == "must_exclude":
        return _product(must_exclude(phrase, selected) for phrase in check.value)
    reference = ", ".join(check.value)
    if not selected:
        return float(not reference)
    judge = require_judge(end.judge, "program_html fuzzy_match")
    return await judge.fuzzy_match(selected, reference, end.intent)


def _product(values: Any) -> float:
    score = 1.0
    for value in values:
        score *= value
    return score
