"""Inference backends behind one interface: prompts in, text + token ids + per-token log-probs out.

- ``local``: transformers in this process, concurrent requests batched together (:mod:`.local`);
- ``openai``: any OpenAI-compatible server (vLLM, SGLang, TGI's Messages API, a webrl actor) (:mod:`.openai_compat`);
- ``tgi``: TGI's native ``/generate`` through ``huggingface_hub.InferenceClient`` (:mod:`.tgi`).

Log-probs are those of the model's own distribution (temperature 1) for each generated token, the end-of-turn
token included when generation stopped on it; ``text`` leaves special tokens out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from webrl.config import Settings


@dataclass
class Generation:
    """One completion: its text, the exact generated token ids and their log-probs."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" (end of turn or stop string) | "length"


@runtime_checkable
class Backend(Protocol):
    """Anything that completes a batch of prompts, in order."""

    name: str
    version: str

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float, *,
                 seed: int | None = None) -> list[Generation]: ...

    def close(self) -> None: ...


class BackendConfigError(ValueError):
    """Settings do not describe a usable backend; the message names the missing setting."""


def make_backend(settings: Settings, *, kind: str | None = None, model: str | None = None,
                 endpoint: str | None = None) -> Backend:
    """The backend that ``settings`` (or the explicit arguments) describe."""
    kind = kind or settings.actor_backend
    model = model or settings.actor_model
    endpoint = endpoint or settings.actor_endpoint
    if kind == "local":
        if not model:
            raise BackendConfigError("the local backend needs a model folder: set WEBRL_ACTOR_MODEL")
        from webrl.models.backends.local import LocalBackend

        return LocalBackend.from_path(model, settings)
    if not endpoint:
        raise BackendConfigError(f"the {kind} backend needs a server: set WEBRL_ACTOR_ENDPOINT")
    if kind == "openai":
        if not model:
            raise BackendConfigError("the openai backend needs the served model name: set WEBRL_ACTOR_MODEL")
        from webrl.models.backends.openai_compat import OpenAIBackend

        return OpenAIBackend(endpoint, model, api_key=settings.actor_api_key)
    if kind == "tgi":
        from webrl.models.backends.tgi import TGIBackend

        return TGIBackend(endpoint, api_key=settings.actor_api_key)
    raise BackendConfigError(f"unknown backend {kind!r}; expected local, openai or tgi")
