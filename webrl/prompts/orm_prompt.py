"""The ORM prompt: WebRL's outcome reward model reads the intent, the action history and the last page.

WebRL's ORM (released as ``webrl-orm-llama-3.1-8b``) is a Llama-3.1 chat model asked to answer YES or NO.
Its training data and its reward come from ``build_rm_data`` / ``add_overall_reward`` in WebRL's
``scripts/process_data.py`` (published code, not in the paper):

- system: :data:`ORM_SYSTEM_PROMPT` (an evaluator that must answer YES or NO);
- user: ``The User Intent:\\n{intent}\\n\\nAction History:\\n{one line per step}\\n``
  ``\\nThe Current Screenshot:\\n{html}``,
  each step's raw response with its newlines joined by ``"; "`` (comment lines such as ``# Element: ...`` kept);
- rendered with LLaMA-Factory's ``llama3`` template (no date lines, unlike Llama-3.1's HF chat template)
  followed by the assistant header, where the model's next token is YES or NO.

Two renderings: :func:`render_llama3_orm` writes that exact string; :func:`render_orm_prompt` goes through the
tokenizer's chat template (any chat model, the tiny CPU model included) unless the tokenizer is a Llama-3
one, where the exact layout wins: Llama-3.1's own HF template adds "Cutting Knowledge Date" lines to the system
turn that the released checkpoint never saw.
:func:`build_orm_prompt` renders a :class:`~webrl.agent.schemas.Trajectory` within a token budget by cutting the
observation only, never the intent or the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from webrl.agent.schemas import Trajectory
from webrl.prompts.actor import COMPLETION_BUDGET

#: The ORM's system prompt, verbatim from WebRL's ``build_rm_data`` (note the typographic apostrophes in
#: "user’s" and "agent’s execution" next to the plain one in "agent's action history": they are in the data
#: the released checkpoint was trained on).
ORM_SYSTEM_PROMPT = (
    "You are an expert in evaluating the performance of a website navigation agent. The agent is designed to "
    "help a human user navigate the website to complete a task. Given the user\u2019s intent, the agent's action "
    "history, and the final state of the screen, your goal is to decide whether the agent\u2019s execution is "
    "successful or not. You must respond with YES or NO."
)

#: The two answers; the ORM's p is the softmax over their logits (``add_overall_reward``).
YES = "YES"
NO = "NO"

#: WebRL's context limit for the ORM: LLaMA-Factory ``cutoff_len: 16384`` (llama3_full_orm_web.yaml) and
#: ``input_ids[:, :16384]`` in ``add_overall_reward`` (published code, not in the paper).
WEBRL_ORM_MAX_TOKENS = 16384

#: Tokens of the context kept free after an ORM prompt when it is cut to a model's context: the trainer's
#: completion budget, so training and scoring cut an observation at the same place.
ORM_CONTEXT_RESERVE = COMPLETION_BUDGET


#: ORM prompt budget of a LoRA ORM on a small pretrained base (SmolLM2-135M, ``webrl train-orm --base
#: smollm2-135m``): with the answer and end of turn one training example is at most ~770 tokens (the trainer's
#: sequences are this + :data:`ORM_CONTEXT_RESERVE` = 1,024 long), which a 2-core CPU trains at a few seconds per
#: example; 16,384 (WebRL's 8B budget) would make each example up to 10x longer. The sandbox's last pages are cut
#: at their end, so the top of the page (title, messages, the first results) is what the ORM reads.
SMALL_ORM_MAX_PROMPT_TOKENS = 768


def orm_prompt_budget(context_tokens: int, limit: int = WEBRL_ORM_MAX_TOKENS) -> int:
    """Most prompt tokens for a model with ``context_tokens`` positions: ``min(limit, context - reserve)``.

    ``context_tokens`` is what the ORM folder declares it reads (:func:`orm_context_tokens`), so a trainer that
    trained on sequences of ``max_length`` tokens and the scorer cut an observation at the same place."""
    return max(1, min(limit, context_tokens - ORM_CONTEXT_RESERVE))


def orm_context_tokens(model_config: Any, tokenizer: Any) -> int | None:
    """Positions an ORM reads: the model's ``max_position_embeddings``, lowered by the tokenizer's
    ``model_max_length`` when that is smaller (an ORM adapter trained on 1,024-token sequences declares 1,024
    there; a tokenizer without a limit has a huge placeholder). None when neither says."""
    limits = [int(v) for v in (getattr(model_config, "max_position_embeddings", None),
                               getattr(tokenizer, "model_max_length", None)) if v]
    return min(limits) if limits else None


_LLAMA3_BOS = "<|begin_of_text|>"
_LLAMA3_HEADER = "<|start_header_id|>{role}<|end_header_id|>\n\n"
_LLAMA3_EOT = "<|eot_id|>"

Layout = Literal["auto", "llama3", "chat_template"]


def history_line(response: str) -> str:
    """One step of the action history: the raw response on one line (``'; '.join(lines).strip()``)."""
    return "; ".join(response.split("\n")).strip()


def build_orm_user_message(intent: str, action_history: Sequence[str], last_observation: str) -> str:
    """The user turn of ``rm_format`` in WebRL's ``build_rm_data``."""
    lines = "".join(history_line(r) + "\n" for r in action_history)
    return (f"The User Intent:\n{intent.strip()}\n\nAction History:\n{lines}"
            f"\nThe Current Screenshot:\n{last_observation.strip()}")


def build_orm_messages(intent: str, action_history: Sequence[str], last_observation: str) -> list[dict[str, str]]:
    """System and user messages of the ORM prompt (the assistant answers YES or NO)."""
    return [
        {"role": "system", "content": ORM_SYSTEM_PROMPT},
        {"role": "user", "content": build_orm_user_message(intent, action_history, last_observation)},
    ]


def render_llama3_orm(intent: str, action_history: Sequence[str], last_observation: str) -> str:
    """The exact prompt ``add_overall_reward`` feeds ``webrl-orm-llama-3.1-8b``::

        <|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\n{system}<|eot_id|>
        <|start_header_id|>user<|end_header_id|>\\n\\n{user}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n
    """
    user = build_orm_user_message(intent, action_history, last_observation)
    return (f"{_LLAMA3_BOS}{_LLAMA3_HEADER.format(role='system')}{ORM_SYSTEM_PROMPT}{_LLAMA3_EOT}"
            f"{_LLAMA3_HEADER.format(role='user')}{user}{_LLAMA3_EOT}{_LLAMA3_HEADER.format(role='assistant')}")


#: Tokens only Meta's Llama-3 tokenizer has together: its headers, end of turn and reserved specials. A tiny
#: model with Llama-3-style headers but its own (system-less) chat template is not one.
_LLAMA3_MARKERS = ("<|start_header_id|>", "<|eot_id|>", "<|reserved_special_token_0|>")


def is_llama3_tokenizer(tokenizer: Any) -> bool:
    """True for Meta's Llama-3 tokenizer (the released ORM's): it has every one of :data:`_LLAMA3_MARKERS`.

    Kept on the tokenizer: ``get_vocab`` builds a fresh dict of the whole vocabulary (18 ms for SmolLM2's 49k
    entries) and fitting one ORM prompt to its budget renders it several times (a 600-link page cut to 768 tokens:
    78 ms a prompt asking anew, 28 ms kept)."""
    cached = getattr(tokenizer, "webrl_is_llama3", None)
    if cached is None:
        vocab = tokenizer.get_vocab()
        cached = all(marker in vocab for marker in _LLAMA3_MARKERS)
        tokenizer.webrl_is_llama3 = cached
    return cached


def render_orm_prompt(tokenizer: Any, intent: str, action_history: Sequence[str], last_observation: str,
                      layout: Layout = "auto") -> str:
    """The ORM prompt as text the tokenizer encodes with ``add_special_tokens=False``.

    ``layout``: ``"llama3"`` the exact WebRL string; ``"chat_template"`` the tokenizer's own template with the
    generation prompt; ``"auto"`` the first for Llama-3 tokenizers and the second otherwise.
    """
    if layout == "llama3" or (layout == "auto" and is_llama3_tokenizer(tokenizer)):
        return render_llama3_orm(intent, action_history, last_observation)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the ORM tokenizer has no chat template and is not a Llama-3 tokenizer; "
                         "give it a chat template or use layout='llama3'")
    messages = build_orm_messages(intent, action_history, last_observation)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def orm_inputs(trajectory: Trajectory) -> tuple[str, list[str], str]:
    """(intent, action history, last observation) of a trajectory, as WebRL's ``rm_format`` reads a trace.

    The history is each step's raw response (WebRL's ``fixed_response``); the last observation is the HTML the
    last step acted on (``content[-1]['html']``), or the trajectory's final page when it has no steps.
    """
    history = [s.response if s.response.strip() else (s.action.format() if s.action else "") for s in trajectory.steps]
    if trajectory.steps:
        html = trajectory.steps[-1].observation.html
    elif trajectory.last_observation is not None:
        html = trajectory.last_observation.html
    else:
        html = ""
    return trajectory.intent, history, html


def n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def build_orm_prompt(tokenizer: Any, trajectory: Trajectory, *, max_tokens: int | None = WEBRL_ORM_MAX_TOKENS,
                     layout: Layout = "auto") -> str:
    """The ORM prompt of ``trajectory`` in at most ``max_tokens`` tokens.

    Only the observation is cut (its end; the top of the page is kept). WebRL instead cuts the token sequence
    at 16384, which can drop the assistant header and with it the position the answer is read from. When the
    intent and history alone overflow the budget, the prompt is returned with an empty observation.
    """
    intent, history, html = orm_inputs(trajectory)
    return render_orm_prompt_within(tokenizer, intent, history, html, max_tokens=max_tokens, layout=layout)


def render_orm_prompt_within(tokenizer: Any, intent: str, action_history: Sequence[str], last_observation: str, *,
                             max_tokens: int | None, layout: Layout = "auto") -> str:
    """:func:`render_orm_prompt` with the observation cut so the prompt fits ``max_tokens`` tokens."""
    text = render_orm_prompt(tokenizer, intent, action_history, last_observation, layout)
    if max_tokens is None or n_tokens(tokenizer, text) <= max_tokens:
        return text
    frame = render_orm_prompt(tokenizer, intent, action_history, "", layout)
    budget = max_tokens - n_tokens(tokenizer, frame)
    html = _cut_to_tokens(tokenizer, last_observation.strip(), budget)
    while True:  # merges across the cut can add a token or two: shrink until it fits
        text = render_orm_prompt(tokenizer, intent, action_history, html, layout)
        if not html or n_tokens(tokenizer, text) <= max_tokens:
            return text
        html = _cut_to_tokens(tokenizer, html, n_tokens(tokenizer, html) - 1)


def _cut_to_tokens(tokenizer: Any, text: str, budget: int) -> str:
    """The longest prefix of ``text`` made of its first ``budget`` tokens (by character offsets)."""
    if budget <= 0:
        return ""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = enc["offset_mapping"]
    if len(offsets) <= budget:
        return text
    end = offsets[budget - 1][1]
    # a character split over several byte-level tokens gives each of them its whole span: when the cut falls
    # between them, drop the character (keeping it would keep every one of its tokens, and the caller's
    # shrink loop would never end)
    return text[: min(end, offsets[budget][0])]
