"""``string_match``: the agent's final answer against ``reference_answers``.

WebArena (``StringEvaluator``): the answer is cleaned (:func:`clean_answer`), then each approach in the
config's order multiplies the score:
- ``exact_match``: cleaned equality;
- ``must_include``: every listed phrase must occur (any of its `` |OR| `` alternatives, as
  WebArena-Lite does); when only one phrase is listed a one-character phrase must be a whole token;
- ``fuzzy_match``: a list of references, each judged by the LLM judge (an empty answer is 0 without a
  call); or ``"N/A"`` for an unachievable task: an exact "N/A" answer scores 1, otherwise the judge decides
  whether the answer gives the reason in ``string_note``, and that verdict *replaces* the score (WebArena).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webrl.agent.schemas import EvalSpec
from webrl.evaluation.base import EpisodeEnd
from webrl.evaluation.harness_errors import EvaluatorBuildError
from webrl.evaluation.judge import require_judge
from webrl.evaluation.string_rules import clean_answer, exact_match, must_include_any

#: WebArena's answer for "this task cannot be done" in ``fuzzy_match``.
UNACHIEVABLE = "N/A"
APPROACHES = ("exact_match", "must_include", "fuzzy_match")


@dataclass(frozen=True)
class StringMatch:
    """A built ``string_match`` check; approaches kept in the config's order."""

    approaches: tuple[tuple[str, Any], ...]
    string_note: str = ""
    name: str = "string_match"

    @classmethod
    def from_spec(cls, spec: EvalSpec) -> StringMatch:
        answers = spec.reference_answers
        if not answers:
            raise EvaluatorBuildError("string_match needs eval.reference_answers (a non-empty object)")
        return cls(approaches=tuple(_checked(k, v) for k, v in answers.items()), string_note=spec.string_note or "")

    async def score(self, end: EpisodeEnd) -> float:
        pred = clean_answer(end.answer)
        score = 1.0
        for approach, value in self.approaches:
            if approach == "exact_match":
                score *= exact_match(value, pred)
            elif approach == "must_include":
                for phrase in value:
                    score *= must_include_any(phrase, pred, tokenize=len(value) == 1)
            elif value == UNACHIEVABLE:
                score = await self._unachievable(score, pred, end)
            elif score > 0:  # a zero product stays zero: no judge call needed
                score *= await _fuzzy_all(value, pred, end)
        return score

    async def _unachievable(self, score: float, pred: str, end: EpisodeEnd) -> float:
        score *= exact_match(UNACHIEVABLE, pred)
        if score == 1.0:
            return score
        judge = require_judge(end.judge, "string_match fuzzy_match 'N/A' (an answer other than N/A)")
        return await judge.unachievable_match(pred, self.string_note, end.intent)


async def _fuzzy_all(references: tuple[str, ...], pred: str, end: EpisodeEnd) -> float:
    """Product over references of the judge's verdict; an empty answer matches only an empty reference."""
    score = 1.0
    for reference in references:
        if not pred:
            score *= float(not reference)
            continue
        judge = require_judge(end.judge, "string_match fuzzy_match")
        score *= await judge.fuzzy_match(pred, reference, end.intent)
        if score == 0:
            break
    return score


def _checked(approach: str, value: Any) -> tuple[str, Any]:
    """Validate one approach's reference value and normalise it to strings."""
    if approach not in APPROACHES:
        raise EvaluatorBuildError(f"string_match: unknown reference_answers key {approach!r}; known: {APPROACHES}")
    if approach == "exact_match":
        if isinstance(value, list | dict) or value is None:
            raise EvaluatorBuildError("string_match exact_match must be one string")
        return approach, str(value)
    if approach == "fuzzy_match" and value == UNACHIEVABLE:
        return approach, UNACHIEVABLE
    if isinstance(value, str):  # WebArena-Lite task 81 writes one phrase without the list: read it as [phrase]
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str | int | float) for v in value):
        raise EvaluatorBuildError(f"string_match {approach} must be a non-empty list of strings")
    return approach, tuple(str(v) for v in value)
