"""The LLM judge behind WebArena's ``fuzzy_match``: an OpenAI-compatible chat endpoint.

WebArena asks GPT-4 (``gpt-4-1106-preview``, temperature 0) two kinds of question
(``evaluation_harness/helper_functions.py``): whether a student answer is semantically equivalent to a
reference (``llm_fuzzy_match``), and whether a report of failure names the reason a task is unachievable
(``llm_ua_match``). The verdict words and how they are read are WebArena's; the endpoint and model come
from ``settings.llm_judge.endpoint`` / ``.model`` (vLLM, SGLang, TGI or OpenAI itself).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from webrl.config import Settings
from webrl.evaluation.harness_errors import LLMJudgeError, LLMJudgeNotConfiguredError

logger = logging.getLogger(__name__)

#: WebArena's sampling for the judge: greedy, room for a short justification before the verdict.
JUDGE_TEMPERATURE = 0.0
JUDGE_MAX_TOKENS = 768

SYSTEM_PROMPT = "You are a helpful assistant"


def fuzzy_prompt(question: str, reference: str, pred: str) -> str:
    """The grading question of ``llm_fuzzy_match``: semantic equivalence, verdict correct/incorrect/partially."""
    return (
        "Help a teacher grade a student's answer to a question. The student may phrase the answer "
        "differently; judge whether it is semantically equivalent to the reference answer.\n"
        f"question: {question}\n"
        f"reference answer: {reference}\n"
        "every 'N/A' you see is a special sequence meaning 'not achievable'\n"
        f"student answer: {pred}\n"
        "Conclude the judgement by correct/incorrect/partially correct."
    )


def unachievable_prompt(question: str, reason: str, report: str) -> str:
    """The question of ``llm_ua_match``: does the agent's report give the reason the task cannot be done."""
    return (
        "A task described in Task_1 cannot be completed for the reason given in Reason_1. Someone tried the "
        "task, failed, and described the attempt in Report_1. Check whether Report_1 refers to Reason_1, "
        "even implicitly. If it does, return same, else return different.\n"
        f"Task_1 = {question}\n"
        f"Reason_1 = {reason}\n"
        f"Report_1 = {report}\n"
        "return [same] or [different]"
    )


def read_fuzzy_verdict(response: str) -> float:
    """WebArena's reading: 'partially correct' or 'incorrect' anywhere -> 0; else 'correct' must appear -> 1."""
    text = response.lower()
    if "partially correct" in text or "incorrect" in text:
        return 0.0
    if "correct" in text:
        return 1.0
    raise LLMJudgeError(f"judge answer has no verdict (correct/incorrect/partially correct): {response[:200]!r}")


def read_unachievable_verdict(response: str) -> float:
    """WebArena's reading: 'different' anywhere -> 0; else 'same' must appear -> 1."""
    text = response.lower()
    if "different" in text:
        return 0.0
    if "same" in text:
        return 1.0
    raise LLMJudgeError(f"judge answer has no verdict (same/different): {response[:200]!r}")


@dataclass(frozen=True)
class LLMJudge:
    """A chat-completions client for one judge model."""

    endpoint: str
    model: str
    api_key: str | None = None
    timeout_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> LLMJudge | None:
        """The configured judge, or None when ``llm_judge.endpoint`` or ``llm_judge.model`` is unset."""
        if not settings.llm_judge.endpoint or not settings.llm_judge.model:
            return None
        return cls(
            endpoint=settings.llm_judge.endpoint.rstrip("/"),
            model=settings.llm_judge.model,
            api_key=settings.llm_judge.api_key,
            timeout_s=settings.llm_judge.timeout_s,
        )

    async def fuzzy_match(self, pred: str, reference: str, question: str) -> float:
        return read_fuzzy_verdict(await self.complete(fuzzy_prompt(question, reference, pred)))

    async def unachievable_match(self, pred: str, reason: str, question: str) -> float:
        return read_unachievable_verdict(await self.complete(unachievable_prompt(question, reason, pred)))

    async def complete(self, prompt: str) -> str:
        """POST ``{endpoint}/chat/completions`` and return the first choice's message text."""
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
            "temperature": JUDGE_TEMPERATURE,
            "top_p": 1.0,
            "max_tokens": JUDGE_MAX_TOKENS,
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        url = f"{self.endpoint}/chat/completions"
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                response = await client.post(url, json=body, headers=headers)
            response.raise_for_status()
            content = response.json()["choices"][0]["message"]["content"]
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMJudgeError(f"LLM judge at {url} failed: {exc}") from exc
        if not isinstance(content, str):
            raise LLMJudgeError(f"LLM judge at {url} returned no text content")
        logger.debug("judge %s answered %r", self.model, content[:200])
        return content


def require_judge(judge: LLMJudge | None, what: str) -> LLMJudge:
    """The judge, or a clear error naming the settings to set."""
    if judge is None:
        raise LLMJudgeNotConfiguredError(what)
    return judge
