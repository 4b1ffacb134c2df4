"""The ``openai`` backend: any OpenAI-compatible completions server (vLLM, SGLang, TGI, a webrl actor).

Which checkpoint the server holds comes from ``GET /v1/models``: vLLM lists each served name with its ``root``,
the folder it loaded (``docker/vllm_supervisor.py`` restarts vLLM on each new actor folder under the same served
name), and a folder's declared version is the checkpoint's version (:meth:`OpenAIBackend.refresh_version`).

It asks for log-probs (``logprobs=1``) and for token ids (``return_tokens_as_token_ids``, vLLM's extension:
tokens come back as ``"token_id:<id>"``); a server that ignores the extension but returns ``token_ids``
on the choice is read too. Without either, ids come from the local tokenizer if one was given.
"""

from __future__ import annotations

from typing import Any

import openai

from webrl.models.backends.base import Generation, version_served

TOKEN_ID_PREFIX = "token_id:"  # vLLM's `return_tokens_as_token_ids` token spelling


def _v1(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


class OpenAIBackend:
    """Completions through the official ``openai`` client."""

    name = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 120.0,
                 tokenizer: Any = None) -> None:
        self.client = openai.OpenAI(base_url=_v1(base_url), api_key=api_key or "EMPTY", timeout=timeout,
                                    max_retries=2)
        self.model = model
        self.version = model
        self.tokenizer = tokenizer

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float, *,
                 seed: int | None = None) -> list[Generation]:
        response = self.client.completions.create(
            model=self.model, prompt=prompts, max_tokens=max_new_tokens, temperature=temperature, logprobs=1,
            seed=seed, extra_body={"return_tokens_as_token_ids": True},
        )
        choices = sorted(response.choices, key=lambda c: c.index)
        return [self._generation(choice) for choice in choices]

    def _generation(self, choice: Any) -> Generation:
        tokens = list(choice.logprobs.tokens or []) if choice.logprobs else []
        logprobs = [float(x) for x in (choice.logprobs.token_logprobs or [])] if choice.logprobs else []
        token_ids = _ids_from_tokens(tokens)
        if token_ids is None:
            extra = getattr(choice, "model_extra", None) or {}
            token_ids = [int(t) for t in extra.get("token_ids") or []] or None
        if token_ids is None and self.tokenizer is not None:
            token_ids = self.tokenizer(choice.text, add_special_tokens=False)["input_ids"]
        finish = "length" if choice.finish_reason == "length" else "stop"
        return Generation(text=choice.text, token_ids=token_ids or [], logprobs=logprobs, finish_reason=finish)

    def refresh_version(self) -> str:
        """Ask the server which folder it serves under ``self.model`` (``root`` in ``GET /v1/models``; the only
        model listed when none has that name) and take that folder's version; the served name when it reports
        no folder this process can read. Raises ``openai.OpenAIError`` when the server cannot be asked."""
        models = list(self.client.models.list())
        chosen = next((m for m in models if m.id == self.model), models[0] if len(models) == 1 else None)
        root = (getattr(chosen, "model_extra", None) or {}).get("root") if chosen is not None else None
        self.version = version_served(str(root)) if root else self.model
        return self.version

    def close(self) -> None:
        self.client.close()


def _ids_from_tokens(tokens: list[str]) -> list[int] | None:
    if not tokens or not all(t.startswith(TOKEN_ID_PREFIX) for t in tokens):
        return None
    return [int(t[len(TOKEN_ID_PREFIX):]) for t in tokens]
