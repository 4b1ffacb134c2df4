"""WebArena's string rules, against cases worked out by hand from its StringEvaluator."""

from __future__ import annotations

from webrl.evaluation.string_rules import (
    clean_answer,
    exact_match,
    must_exclude,
    must_include,
    must_include_any,
    word_tokenize,
)


def test_clean_answer_strips_one_quote_pair_and_lowers() -> None:
    assert clean_answer('  "Hello World"  ') == "hello world"
    assert clean_answer("'Quoted'") == "quoted"
    assert clean_answer("\"'nested'\"") == "'nested'"
    assert clean_answer("'unbalanced\"") == "'unbalanced\""


def test_exact_match_passes_and_fails() -> None:
    assert exact_match("Canceled", "  canceled ") == 1.0
    assert exact_match("Canceled", "cancelled") == 0.0
    assert exact_match("N/A", '"n/a"') == 1.0


def test_must_include_substring_and_single_character_tokens() -> None:
    assert must_include("Pittsburgh", "It ships to PITTSBURGH, PA") == 1.0
    assert must_include("Boston", "It ships to Pittsburgh") == 0.0
    # WebArena tokenises a one-character reference when it is the only phrase: "0" is not in "10".
    assert must_include("0", "there are 10 orders", tokenize=True) == 0.0
    assert must_include("0", "there are 0 orders.", tokenize=True) == 1.0
    assert must_include("0", "there are 10 orders", tokenize=False) == 1.0


def test_word_tokenize_splits_sentences_and_punctuation() -> None:
    assert word_tokenize("There are 2. The rest is 10,000.") == [
        "There", "are", "2", ".", "The", "rest", "is", "10,000", ".",
    ]


def test_must_include_any_reads_or_alternatives() -> None:
    assert must_include_any("65 |OR| 3", "I found 3 of them", tokenize=True) == 1.0
    assert must_include_any("65 |OR| 3", "I found 30 of them", tokenize=True) == 0.0
    assert must_include_any("cat |OR| dog", "a dog barks") == 1.0


def test_must_exclude_passes_and_fails() -> None:
    assert must_exclude("Spam", "a clean page") == 1.0
    assert must_exclude("Spam", "this is spam here") == 0.0
    assert must_exclude("spam", "spamming is fine") == 1.0  # one token: compared against whole tokens
    assert must_exclude("bad review", "a bad review text") == 0.0
