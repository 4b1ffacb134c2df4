"""The ``llm`` generator: WebRL's in-breadth evolution prompt sent to any OpenAI-compatible endpoint
(GPT-4o, a vLLM-served model, or a webrl actor's ``/v1/completions``), and an LLM feasibility judge."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from webrl.agent.schemas import TaskConfig
from webrl.config import SITE_PLACEHOLDERS
from webrl.prompts.taskgen import build_evolution_prompt, build_feasibility_prompt, extract_backticked

log = logging.getLogger(__name__)

MIN_INTENT_CHARS = 12  # shorter answers are fragments ("`Click`"), not tasks
MAX_INTENT_CHARS = 300
MIN_WORDS = 3
_META = re.compile(r"\b(given task|created task|example task|new task)s?\b", re.IGNORECASE)
_CODE = re.compile(r"[{}<>\\]|do\(|exit\(")
#: The key sent to an endpoint without one: vLLM's convention (the OpenAI client refuses an empty key).
NO_API_KEY = "EMPTY"


@dataclass(frozen=True)
class Rejection:
    text: str
    reason: str


def validate_intent(text: str) -> str | None:
    """Why ``text`` is not a usable task, or None when it is."""
    if not MIN_INTENT_CHARS <= len(text) <= MAX_INTENT_CHARS:
        return f"length {len(text)} outside [{MIN_INTENT_CHARS}, {MAX_INTENT_CHARS}]"
    if len(text.split()) < MIN_WORDS:
        return f"fewer than {MIN_WORDS} words"
    if _META.search(text):
        return "mentions the prompt's own vocabulary"
    if _CODE.search(text):
        return "looks like code or markup"
    if not any(ch.isalpha() for ch in text):
        return "no letters"
    return None


def parse_generated(site: str, text: str) -> tuple[list[str], list[Rejection]]:
    """Tasks parsed out of a model's answer, and the rejected spans with their reasons."""
    spans = extract_backticked(text)
    if not spans:
        return [], [Rejection(text[:200], "no backticked task in the answer")]
    good, bad = [], []
    for span in spans:
        reason = validate_intent(span)
        if reason is None:
            good.append(span)
        else:
            bad.append(Rejection(span, reason))
    return good, bad


def llm_task_config(site: str, intent: str, task_id: str, start_url: str | None = None) -> TaskConfig:
    """A WebArena config for a generated task: no evaluator (the ORM judges it), placeholder start URL."""
    return TaskConfig.from_json({
        "sites": [site], "task_id": task_id, "require_login": True,
        "storage_state": f"./.auth/{site}_state.json", "start_url": start_url or SITE_PLACEHOLDERS[site],
        "geolocation": None, "intent_template": None, "instantiation_dict": {}, "intent": intent,
        "require_reset": False, "eval": None, "intent_template_id": None,
    })


class OpenAICompatibleLLM:
    """Chat or plain completions against an OpenAI-compatible server, with the official client."""

    def __init__(self, base_url: str, model: str, api_key: str = NO_API_KEY, mode: str = "chat",
                 max_tokens: int = 512, temperature: float = 1.0, timeout: float = 120.0) -> None:
        from openai import OpenAI

        if mode not in ("chat", "completions"):
            raise ValueError(f"mode must be chat or completions, got {mode!r}")
        self.client = OpenAI(base_url=base_url.rstrip("/") + ("" if base_url.rstrip("/").endswith("/v1") else "/v1"),
                             api_key=api_key, timeout=timeout)
        self.model, self.mode = model, mode
        self.max_tokens, self.temperature = max_tokens, temperature

    def complete(self, prompt: str, max_tokens: int | None = None, temperature: float | None = None) -> str:
        tokens = max_tokens or self.max_tokens
        temp = self.temperature if temperature is None else temperature
        if self.mode == "chat":
            response = self.client.chat.completions.create(
                model=self.model, messages=[{"role": "user", "content": prompt}], max_tokens=tokens,
                temperature=temp)
            return response.choices[0].message.content or ""
        completion = self.client.completions.create(model=self.model, prompt=prompt, max_tokens=tokens,
                                                    temperature=temp)
        return completion.choices[0].text or ""


class LLMGenerator:
    """In-breadth evolution through an LLM; malformed output is rejected with a logged reason."""

    def __init__(self, llm: OpenAICompatibleLLM, tasks_per_prompt: int = 10) -> None:
        self.llm = llm
        self.tasks_per_prompt = tasks_per_prompt

    def evolve(self, site: str, failed_intents: list[str]) -> tuple[list[str], list[Rejection]]:
        answer = self.llm.complete(build_evolution_prompt(site, failed_intents, self.tasks_per_prompt))
        good, bad = parse_generated(site, answer)
        for rejection in bad:
            log.info("taskgen llm: rejected %r: %s", rejection.text[:80], rejection.reason)
        return good, bad

    def feasible(self, site: str, intent: str) -> bool:
        """The judge's answer: a YES at the start of its reply (case-insensitive)."""
        answer = self.llm.complete(build_feasibility_prompt(site, intent), max_tokens=4, temperature=0.0)
        return answer.strip().upper().startswith("YES")
