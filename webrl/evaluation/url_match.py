"""``url_match``: the url of the agent's page against ``reference_url``.

WebArena (``URLEvaluator``): references are split on `` |OR| ``, urls lose trailing slashes, and with the
rule ``"GOLD in PRED"`` (the default when ``url_note`` is absent) the score is
``base * query`` where ``base`` = 1 if some reference's host+path is a substring of the prediction's
host+path, and ``query`` = product over every query key in the references of
1[some reference value of that key is among the prediction's values]. WebArena-Lite adds ``"EXACT"``:
the cleaned prediction equals one cleaned reference.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from urllib.parse import parse_qs, urlparse

from webrl.agent.schemas import EvalSpec
from webrl.evaluation.base import EpisodeEnd
from webrl.evaluation.harness_errors import EvaluatorBuildError
from webrl.evaluation.string_rules import OR_SEPARATOR

GOLD_IN_PRED = "GOLD in PRED"
EXACT = "EXACT"
RULES = (GOLD_IN_PRED, EXACT)


def clean_url(url: str) -> str:
    """WebArena's ``clean_url``: drop trailing slashes."""
    return str(url).rstrip("/")


def split_url(url: str) -> tuple[str, dict[str, list[str]]]:
    """``(host + path, query values by key)``; blank query values are dropped, as ``parse_qs`` does."""
    parsed = urlparse(url)
    return parsed.netloc + parsed.path, parse_qs(parsed.query)


def gold_in_pred(pred: str, references: list[str]) -> float:
    """WebArena's "GOLD in PRED" score of a (cleaned) predicted url against (cleaned) references."""
    pred_base, pred_query = split_url(pred)
    ref_query: dict[str, set[str]] = defaultdict(set)
    base = 0.0
    for ref in references:
        ref_base, query = split_url(ref)
        base = max(base, float(ref_base in pred_base))
        for key, values in query.items():
            ref_query[key].update(values)
    query_score = 1.0
    for key, allowed in ref_query.items():
        query_score *= float(any(value in pred_query.get(key, []) for value in allowed))
    return base * query_score


def url_score(pred_url: str, reference_url: str, rule: str = GOLD_IN_PRED) -> float:
    """Score ``pred_url`` against ``reference_url`` (`` |OR| ``-separated) under ``rule``."""
    pred = clean_url(pred_url)
    references = [clean_url(ref) for ref in reference_url.split(OR_SEPARATOR)]
    if rule == EXACT:
        return float(pred in references)
    return gold_in_pred(pred, references)


@dataclass(frozen=True)
class UrlMatch:
    """A built ``url_match`` check."""

    reference_url: str
    rule: str = GOLD_IN_PRED
    name: str = "url_match"

    @classmethod
    def from_spec(cls, spec: EvalSpec) -> UrlMatch:
        if not spec.reference_url or not spec.reference_url.strip():
            raise EvaluatorBuildError("url_match needs eval.reference_url")
        rule = spec.url_note or GOLD_IN_PRED
        if rule not in RULES:
            raise EvaluatorBuildError(f"url_match: unknown url_note {rule!r}; known: {RULES}")
        return cls(reference_url=spec.reference_url, rule=rule)

    async def score(self, end: EpisodeEnd) -> float:
        return url_score(end.page_url, self.reference_url, self.rule)
