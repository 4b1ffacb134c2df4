"""WebArena's string rules: answer cleaning, exact match, must-include, must-exclude, ``|OR|`` alternatives.

Source: WebArena ``evaluation_harness/evaluators.py`` (``StringEvaluator``, commit f62e0b9), and for
``must_exclude`` VisualAgentBench's WebArena-Lite evaluator. Every score is 0.0 or 1.0.
"""

from __future__ import annotations

from functools import lru_cache

#: WebArena writes alternatives of one required phrase as ``"a |OR| b"`` (spaces included).
OR_SEPARATOR = " |OR| "


def clean_answer(answer: str) -> str:
    """WebArena's ``clean_answer``: strip whitespace, drop one pair of enclosing quotes, lower-case."""
    answer = answer.strip()
    if any(answer.startswith(quote) and answer.endswith(quote) for quote in ("'", '"')):
        answer = answer[1:-1]
    return answer.lower()


@lru_cache(maxsize=1)
def _tokenizers() -> tuple:
    """NLTK's word tokenizer pieces: Punkt sentence splitting, then the improved Treebank tokenizer.

    ``nltk.word_tokenize`` is exactly these two steps, but loads Punkt's English parameters from
    ``nltk_data``, which cannot be downloaded here; an untrained Punkt splits sentences on the same
    punctuation rules without the learned abbreviation list.
    """
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def word_tokenize(text: str) -> list[str]:
    """Words and punctuation of ``text`` as ``nltk.word_tokenize`` splits them."""
    sentences, words = _tokenizers()
    return [token for sentence in sentences.tokenize(text) for token in words.tokenize(sentence)]


def exact_match(ref: str, pred: str) -> float:
    """1.0 when the cleaned prediction equals the cleaned reference."""
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    """1.0 when the cleaned reference occurs in the cleaned prediction.

    With ``tokenize`` (WebArena sets it when a task lists a single must-include phrase), a one-character
    reference must be a whole token of the prediction, so ``"0"`` is not found in ``"10"``.
    """
    clean_ref, clean_pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(clean_ref) == 1 and len(word_tokenize(clean_ref)) == 1:
        return float(clean_ref in word_tokenize(clean_pred))
    return float(clean_ref in clean_pred)


def must_include_any(phrase: str, pred: str, tokenize: bool = False) -> float:
    """1.0 when any `` |OR| `` alternative of ``phrase`` is included in ``pred``."""
    return float(any(must_include(alt, pred, tokenize=tokenize) for alt in phrase.split(OR_SEPARATOR)))


def must_exclude(ref: str, pred: str) -> float:
    """1.0 when the cleaned reference is absent from the prediction (VisualAgentBench's rule: a one-token
    reference is compared against the prediction's tokens, a longer one as a substring)."""
    clean_ref, clean_pred = clean_answer(ref), clean_answer(pred)
    if len(word_tokenize(clean_ref)) == 1:
        return float(clean_ref not in word_tokenize(clean_pred))
    return float(clean_ref not in clean_pred)
