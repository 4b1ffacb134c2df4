"""The WebRL actor prompt, in two renderings.

The prompt holds the intent, one round per earlier step (its observation elided to
``** Simplified html **``, its response kept) and the current simplified HTML, cut to a context budget.

- :func:`render_actor_prompt` renders :func:`build_actor_messages` through the model's own chat template,
  so any Hugging Face chat model (Llama-3.1, GLM-4, the tiny model) gets its native layout.
- :func:`render_llama3_webrl` writes the exact string the released WebRL Llama-3.1 checkpoints were trained
  on: LLaMA-Factory's ``llama3_web`` template (``<|begin_of_text|>`` + system turn, then the user content
  verbatim) around the policy prompt of WebRL's ``scripts/process_data.py`` ``format_prompt`` (published
  code, not in the paper).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from webrl.agent.schemas import Step

#: What earlier rounds show instead of their HTML (published WebRL/VAB-WebArena-Lite traces).
ELIDED_HTML = "** Simplified html **"

#: Characters of the Llama-3 prompt (history + HTML) WebRL allows: cutoff_len 16384 minus 512
#: (``format_prompt`` in WebRL's scripts/process_data.py; published code, not in the paper).
WEBRL_PROMPT_CHARS = 16384 - 512

#: Tokens a training sequence keeps for the completion after the prompt: the trainer cuts a prompt to
#: max_length - this, so max_length = the served prompt budget + this trains on the prompt the actor saw. Actions
#: are one line plus a comment; WebRL generates at most 512 new tokens (published config ``max_new_tokens``).
COMPLETION_BUDGET = 256

#: The system prompt of WebRL's released actor (VAB-WebArena-Lite ``webrl`` prompt), limited to the
#: functions our action grammar accepts.
WEBRL_SYSTEM_PROMPT = """# Setup
You are a professional web browsing agent assistant that can fulfill user's high-level instructions. \
Given Simplified html of the browsed webpage at each step, you plan operations in python-style pseudo code \
using provided functions, or customize functions (if necessary) and then provide their implementations.
# More details about the code
Your code should be readable, simple, and only **ONE-LINE-OF-CODE** at a time, avoid using loop statement \
and only use if-else control if necessary. Predefined functions are as follow:

```
def do(action, argument, element):
\t\"\"\"A single browsing operation on the webpage.
\tArgs:
\t\t:param action: one of the actions from ["Click", "Type", "Search", "Hover", "Scroll Up", "Scroll Down", \
"Press Enter", "Select Dropdown Option", "Go Backward", "Go Forward"].
\t\t:param argument: optional. Only for "Type", "Search" and "Select Dropdown Option", indicating the \
content to type in or the option to select. "Search" action is equivalent to "Type" action plus "Enter" \
key press.
\t\t:param element: optional. Only for "Click", "Type", "Search", "Select Dropdown Option", and "Hover". \
Should be specific element id in the html.
\tReturns:
\t\tNone. The webpage will be updated after executing the action.
\t\"\"\"

def exit(message):
\t\"\"\"Ending the browsing process if the assistant think it has fulfilled the goal.
\tArgs:
\t\t:param message: optional. If user's instruction is a question, return assistant's answer in the \
message based on the browsing content.
\tReturns:
\t\tNone.
\t\"\"\"
```

REMEMBER:
- only **ONE-LINE-OF-CODE** at a time
- Don't generate an operation element that you do not see in the html.
- Use "# Element" to describe the element you choose in the html.
- Use "# Note" to record information useful to answer the instruction if needed.
- If you find yourself fallen into some sort of loop, try to use another method or change your action.
- Your answer shouldn't be in a code snippet format. Just write the function name and its arguments."""

#: The system prompt of small bases (``webrl_prompt.json`` "compact"): the same grammar in ~110 tokens instead of
#: ~560, because a 135M model on a CPU pays for every prompt token at every step, in training and in rollouts.
COMPACT_SYSTEM_PROMPT = """You are a web browsing agent. Read the task and the simplified HTML of the page, then \
write ONE line of code, the next operation:
do(action="Click", element="<id>") | do(action="Hover", element="<id>")
do(action="Type", argument="<text>", element="<id>") | do(action="Search", argument="<text>", element="<id>")
do(action="Select Dropdown Option", argument="<option>", element="<id>")
do(action="Scroll Down") | do(action="Scroll Up") | do(action="Press Enter") | do(action="Go Backward")
exit(message="<the answer, if the task asks a question>")
Before an action on an element, write "# Element: <the element>" on its own line."""

#: The system prompt of each prompt style a model folder may declare (``webrl.models.loading.attach_prompt_style``).
SYSTEM_PROMPTS = {"webrl": WEBRL_SYSTEM_PROMPT, "compact": COMPACT_SYSTEM_PROMPT}


class _FromTokenizer:
    """Default of ``system``: the system prompt of the style the tokenizer's model was trained with."""

    def __repr__(self) -> str:
        return "FROM_TOKENIZER"


FROM_TOKENIZER: Any = _FromTokenizer()


def system_prompt_for(tokenizer: Any) -> str:
    """The system prompt the model behind ``tokenizer`` expects: its folder's declared style, WebRL's otherwise."""
    return SYSTEM_PROMPTS[getattr(tokenizer, "webrl_prompt_style", "webrl")]


_LLAMA3_BOS = "<|begin_of_text|>"
_LLAMA3_TURN = "<|eot_id|><|start_header_id|>{role}<|end_header_id|>\n"


def _responses(history: Sequence[Step | str]) -> list[str]:
    return [h if isinstance(h, str) else h.response for h in history]


def build_actor_messages(intent: str, history: Sequence[Step | str], observation: str,
                         system: str | None = WEBRL_SYSTEM_PROMPT) -> list[dict[str, str]]:
    """Chat messages for one actor step (WebRL's chat layout).

    Round 0's user turn carries ``Task Instruction: <intent>``; later rounds show :data:`ELIDED_HTML`
    and keep the earlier response; the last user turn carries the current HTML. ``history`` is the
    earlier steps (or their raw responses), oldest first.
    """
    messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
    responses = _responses(history)
    for i, response in enumerate(responses):
        shown = intent if i == 0 else ELIDED_HTML
        messages.append({"role": "user", "content": _user_turn(intent, i, shown)})
        messages.append({"role": "assistant", "content": response.strip()})
    messages.append({"role": "user", "content": _user_turn(intent, len(responses), observation)})
    return messages


def _user_turn(intent: str, index: int, body: str) -> str:
    if index == 0:
        return f"Task Instruction: {intent}\n\nRound 0\n{body}"
    return f"Round {index}\n{body}"


def _apply_template(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _n_tokens(tokenizer: Any, text: str) -> int:
    # verbose=False: measuring an over-long prompt before cutting it is expected, not worth transformers' warning
    return len(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def render_actor_prompt(tokenizer: Any, intent: str, history: Sequence[Step | str], observation: str, *,
                        max_tokens: int | None = None, system: str | None = FROM_TOKENIZER) -> str:
    """The actor prompt through ``tokenizer``'s chat template, cut to ``max_tokens`` prompt tokens.

    When the prompt is too long, the fewest oldest rounds are dropped so that the prompt with an empty HTML
    fits, then the current HTML is cut from its end (the top of the page is kept) to the longest prefix that
    fits. Linear in the history: the rounds to drop are found from one tokenisation of each round (then
    checked by a few renders), never by re-rendering the prompt once per dropped round.
    """
    history = list(history)
    if system is FROM_TOKENIZER:
        system = system_prompt_for(tokenizer)

    def render(past: list[Step | str], html: str) -> str:
        return _apply_template(tokenizer, build_actor_messages(intent, past, html, system))

    longest_html = len(observation) if max_tokens is None else max_tokens * max_token_chars(tokenizer)
    if len(observation) <= longest_html:  # a page longer than that cannot fit: do not tokenise all of it
        text = render(history, observation)
        if max_tokens is None or _n_tokens(tokenizer, text) <= max_tokens:
            return text
    assert max_tokens is not None
    history = history[_rounds_to_drop(tokenizer, history, max_tokens, render):]
    low, high = 0, min(len(observation), longest_html)  # longest fitting prefix: binary search over characters
    while low < high:
        mid = (low + high + 1) // 2
        if _n_tokens(tokenizer, render(history, observation[:mid])) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    return render(history, observation[:low])


def max_token_chars(tokenizer: Any) -> int:
    """Characters one token can cover at most: the longest vocabulary entry (a byte-level entry has one
    character per byte, so it is never shorter than the text it stands for). Kept on the tokenizer."""
    cached = getattr(tokenizer, "webrl_max_token_chars", None)
    if cached is None:
        cached = max(len(token) for token in tokenizer.get_vocab())
        tokenizer.webrl_max_token_chars = cached
    return cached


def _rounds_to_drop(tokenizer: Any, history: list[Step | str], max_tokens: int,
                    render: Callable[[list[Step | str], str], str]) -> int:
    """The fewest oldest rounds to drop so that the prompt with an empty HTML fits ``max_tokens`` (all of them
    when none fits). An estimate from each round's own tokens (plus the template's average cost per round),
    corrected by galloping from it: O(history) tokens counted, and O(log error) renders of what is kept."""
    if not history:
        return 0
    full = _n_tokens(tokenizer, render(history, ""))
    if full <= max_tokens:
        return 0
    responses = _responses(history)
    own = [_n_tokens(tokenizer, f"Round {i}\n{ELIDED_HTML}{r.strip()}") for i, r in enumerate(responses)]
    template = (full - _n_tokens(tokenizer, render([], "")) - sum(own)) / len(history)
    guess, excess = 0, full - max_tokens
    while guess < len(history) and excess > 0:
        excess -= own[guess] + template
        guess += 1
    return least_true(lambda k: _n_tokens(tokenizer, render(history[k:], "")) <= max_tokens, guess, len(history))


def least_true(holds: Callable[[int], bool], guess: int, n: int) -> int:
    """The least k in [0, n] where ``holds`` (monotone: false, then true; true at n, never probed) is true,
    galloping out from ``guess`` then bisecting: O(log |answer - guess|) probes."""
    guess = min(max(guess, 0), n)
    if guess == n or holds(guess):
        true_at, step = guess, 1
        while true_at - step >= 0 and holds(true_at - step):
            true_at -= step
            step *= 2
        false_at = max(true_at - step, -1)
    else:
        false_at, step = guess, 1
        while false_at + step < n and not holds(false_at + step):
            false_at += step
            step *= 2
        true_at = min(false_at + step, n)
    while true_at - false_at > 1:
        mid = (false_at + true_at) // 2
        if holds(mid):
            true_at = mid
        else:
            false_at = mid
    return true_at


def render_llama3_webrl(intent: str, history: Sequence[Step | str], observation: str, *,
                        max_chars: int = WEBRL_PROMPT_CHARS, system: str | None = WEBRL_SYSTEM_PROMPT) -> str:
    """The exact Llama-3 prompt of the released WebRL checkpoints.

    ``<|begin_of_text|>`` and the system turn (LLaMA-Factory ``llama3_web``), then ``format_prompt`` of
    WebRL's ``process_data.py``::

        Task Instruction: {intent}\\n\\n
        Round {i}\\n\\n<|eot_id|><|start_header_id|>user<|end_header_id|>\\n{intent or ** Simplified html **}
        \\n\\n<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n{response_i}\\n\\n   (per earlier round)
        Round {n}\\n\\n<|eot_id|><|start_header_id|>user<|end_header_id|>\\n{html}\\n\\n
        <|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n

    The HTML is cut so that history + HTML stay within ``max_chars`` characters, as WebRL does.
    """
    responses = _responses(history)
    rounds = []
    for i, response in enumerate(responses):
        shown = intent if i == 0 else ELIDED_HTML
        rounds.append(f"Round {i}\n\n{_LLAMA3_TURN.format(role='user')}{shown}\n\n"
                      f"{_LLAMA3_TURN.format(role='assistant')}{response}\n\n")
    past = "".join(rounds)
    html = observation
    if len(past) + len(html) > max_chars:
        html = html[: max(0, max_chars - len(past))]
    current = (f"Round {len(responses)}\n\n{_LLAMA3_TURN.format(role='user')}{html}\n\n"
               f"{_LLAMA3_TURN.format(role='assistant')}")
    head = _LLAMA3_BOS
    if system:
        head += f"<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>"
    return f"{head}Task Instruction: {intent}\n\n{past}{current}"
