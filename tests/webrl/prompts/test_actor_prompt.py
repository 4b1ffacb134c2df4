"""The actor prompt in both renderings, pinned character for character."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from webrl.models.tiny import build_tokenizer
from webrl.prompts.actor import (
    ELIDED_HTML,
    WEBRL_SYSTEM_PROMPT,
    build_actor_messages,
    render_actor_prompt,
    render_llama3_webrl,
)

INTENT = "Show me the products in the Electronics category"
HTML = '<html> <a id="3"> Electronics </a> <a id="4"> Books </a> </html>'
HISTORY = ['# Element: the Catalog link\ndo(action="Click", element="2")', 'do(action="Scroll Down")']


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    corpus = [INTENT, HTML, *HISTORY] * 20
    return build_tokenizer(corpus, Path(tmp_path_factory.mktemp("tok")), vocab_size=1500)


def test_llama3_layout_is_webrl_process_data_format() -> None:
    text = render_llama3_webrl(INTENT, HISTORY, HTML, system=None)
    expected = (
        "<|begin_of_text|>"
        f"Task Instruction: {INTENT}\n\n"
        "Round 0\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        f"{INTENT}\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n{HISTORY[0]}\n\n"
        "Round 1\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        f"{ELIDED_HTML}\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n{HISTORY[1]}\n\n"
        "Round 2\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        f"{HTML}\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    )
    assert text == expected


def test_llama3_layout_first_round_and_system_turn() -> None:
    text = render_llama3_webrl(INTENT, [], HTML)
    assert text == (
        f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{WEBRL_SYSTEM_PROMPT}<|eot_id|>"
        f"Task Instruction: {INTENT}\n\nRound 0\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        f"{HTML}\n\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
    )


def test_llama3_layout_cuts_html_to_the_character_budget() -> None:
    long_html = "<div>" + "x" * 5000 + "</div>"
    text = render_llama3_webrl(INTENT, HISTORY, long_html, max_chars=1000, system=None)
    past = text.split("Round 2")[0].split(f"Task Instruction: {INTENT}\n\n")[1]
    html = text.split("<|start_header_id|>user<|end_header_id|>\n")[-1].split("\n\n<|eot_id|>")[0]
    assert len(past) + len(html) == 1000
    assert long_html.startswith(html)


def test_messages_elide_earlier_observations() -> None:
    messages = build_actor_messages(INTENT, HISTORY, HTML)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[1]["content"] == f"Task Instruction: {INTENT}\n\nRound 0\n{INTENT}"
    assert messages[3]["content"] == f"Round 1\n{ELIDED_HTML}"
    assert messages[4]["content"] == HISTORY[1]
    assert messages[5]["content"] == f"Round 2\n{HTML}"
    assert build_actor_messages(INTENT, [], HTML, system=None) == [
        {"role": "user", "content": f"Task Instruction: {INTENT}\n\nRound 0\n{HTML}"}]


def test_chat_template_rendering_of_the_tiny_tokenizer(tokenizer) -> None:
    text = render_actor_prompt(tokenizer, INTENT, HISTORY[:1], HTML)
    assert text == (
        "<|begin_of_text|>"
        f"<|start_header_id|>user<|end_header_id|>\nTask Instruction: {INTENT}\n\nRound 0\n{INTENT}<|eot_id|>"
        f"<|start_header_id|>assistant<|end_header_id|>\n{HISTORY[0]}<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\nRound 1\n{HTML}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n"
    )


def test_task_reminder_template_repeats_the_instruction_after_the_page(tmp_path: Path) -> None:
    tokenizer = build_tokenizer([INTENT, HTML, *HISTORY] * 5, tmp_path, vocab_size=800, task_reminder=True)
    text = render_actor_prompt(tokenizer, INTENT, HISTORY[:1], HTML)
    assert text.endswith(f"Round 1\n{HTML}\nTask Instruction: {INTENT}<|eot_id|>"
                         "<|start_header_id|>assistant<|end_header_id|>\n")
    first = render_actor_prompt(tokenizer, INTENT, [], HTML)  # round 0: the reminder closes the same turn
    assert first.endswith(f"Round 0\n{HTML}\nTask Instruction: {INTENT}<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n")
    # turns that are not an actor's (the ORM's) get no reminder
    orm = tokenizer.apply_chat_template([{"role": "user", "content": "Is it done?"}], tokenize=False,
                                        add_generation_prompt=True)
    assert orm == "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\nIs it done?<|eot_id|>" \
                  "<|start_header_id|>assistant<|end_header_id|>\n"


def test_chat_rendering_fits_the_token_budget(tokenizer) -> None:
    long_html = " ".join(f'<a id="{i}"> Electronics </a>' for i in range(300))
    full = render_actor_prompt(tokenizer, INTENT, HISTORY, long_html)
    budget = 200
    cut = render_actor_prompt(tokenizer, INTENT, HISTORY, long_html, max_tokens=budget)
    n = len(tokenizer(cut, add_special_tokens=False)["input_ids"])
    assert n <= budget < len(tokenizer(full, add_special_tokens=False)["input_ids"])
    assert n > budget * 0.8  # cut by the overflow, not to nothing
    assert INTENT in cut and cut.endswith("<|start_header_id|>assistant<|end_header_id|>\n")
    html_kept = cut.split("Round 2\n")[1].split("<|eot_id|>")[0]
    assert long_html.startswith(html_kept)


def test_chat_rendering_drops_oldest_rounds_when_html_alone_cannot_fit(tokenizer) -> None:
    history = [f'do(action="Click", element="{i}")' for i in range(40)]
    three_rounds = render_actor_prompt(tokenizer, INTENT, history[-3:], "")
    budget = len(tokenizer(three_rounds, add_special_tokens=False)["input_ids"]) + 3
    cut = render_actor_prompt(tokenizer, INTENT, history, HTML, max_tokens=budget)
    assert len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= budget
    assert 'element="39"' in cut and 'element="37"' in cut and 'element="36"' not in cut
    assert cut.startswith(three_rounds.split("Round 3")[0])


class CountingTokenizer:
    """The tiny tokenizer, counting the characters it is asked to tokenise (the prompt builder's work)."""

    def __init__(self, inner) -> None:
        self.inner, self.chars = inner, 0

    def __call__(self, text: str, **kwargs):
        self.chars += len(text)
        return self.inner(text, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def _dropped_one_at_a_time(tokenizer, history: list[str], budget: int) -> list[str]:
    """The rounds kept by dropping the oldest one per re-render (the reference the faster search must match)."""
    def n(past: list[str]) -> int:
        return len(tokenizer(render_actor_prompt(tokenizer, INTENT, past, ""), add_special_tokens=False)["input_ids"])

    while history and n(history) > budget:
        history = history[1:]
    return history


@pytest.mark.parametrize("budget", [60, 90, 150, 400, 2000])
def test_dropping_rounds_keeps_what_one_at_a_time_dropping_keeps(tokenizer, budget: int) -> None:
    history = [f'# Note: step {i}\ndo(action="Click", element="{i}")' if i % 3 else f'do(action="Type", '
               f'argument="{"x" * i}", element="{i}")' for i in range(40)]
    kept = _dropped_one_at_a_time(tokenizer, history, budget)
    cut = render_actor_prompt(tokenizer, INTENT, history, HTML, max_tokens=budget)
    assert cut.count("<|start_header_id|>assistant") - 1 == len(kept)  # one turn per kept round, plus the prompt's
    if kept:
        assert kept[0].strip() in cut and (len(kept) == len(history) or history[-len(kept) - 1] not in cut)
    assert len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= budget


def test_prompt_building_is_linear_in_the_history(tokenizer) -> None:
    """Characters tokenised for 100/200/400/800 history entries grow by the ratio of the entries (2 per
    doubling; dropping one round per re-render grew by 4)."""
    work = []
    for n in (100, 200, 400, 800):
        counting = CountingTokenizer(tokenizer)
        history = [f'do(action="Click", element="{i}")' for i in range(n)]
        render_actor_prompt(counting, INTENT, history, HTML * 50, max_tokens=300)
        work.append(counting.chars)
    ratios = [b / a for a, b in itertools.pairwise(work)]
    assert all(1.5 < r < 2.5 for r in ratios), (work, ratios)


def test_a_huge_page_is_not_tokenised_whole(tokenizer) -> None:
    counting = CountingTokenizer(tokenizer)
    huge = HTML * 200_000  # ~13 MB
    cut = render_actor_prompt(counting, INTENT, HISTORY, huge, max_tokens=300)
    assert len(tokenizer(cut, add_special_tokens=False)["input_ids"]) <= 300 and HTML in cut
    assert counting.chars < len(huge) / 20, counting.chars
