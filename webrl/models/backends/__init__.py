"""Inference backends behind one interface: prompts in, text + token ids + per-token log-probs out.

- ``local``: transformers in this process, concurrent requests batched together (:mod:`.local`);
- ``openai``: any OpenAI-compatible server (vLLM, SGLang, TGI's Messages API, a webrl actor) (:mod:`.openai_compat`);
- ``tgi``: TGI's native ``/generate`` through ``huggingface_hub.InferenceClient`` (:mod:`.tgi`).

Log-probs are those of the model's own distribution (temperature 1) for each generated token, the end-of-turn
token included when generation stopped on it; ``text`` leaves special tokens out. The interface is in
:mod:`.base`, so that the backends need not import this package's factory.
"""

from __future__ import annotations

from webrl.config import Settings
from webrl.models.backends.base import Backend, BackendConfigError, Generation

__all__ = ["Backend", "BackendConfigError", "Generation", "make_backend"]


def make_backend(settings: Settings, *, kind: str | None = None, model: str | None = None,
                 endpoint: str | None = None) -> Backend:
    """The backend that ``settings`` (or the explicit arguments) describe."""
    kind = kind or settings.actor.backend
    model = model or settings.actor.model
    endpoint = endpoint or settings.actor.endpoint
    if kind == "local":
        if not model:
            raise BackendConfigError("the local backend needs a model folder: set WEBRL_ACTOR__MODEL")
        from webrl.models.backends.local import LocalBackend

        return LocalBackend.from_path(model, settings)
    if not endpoint:
        raise BackendConfigError(f"the {kind} backend needs a server: set WEBRL_ACTOR__ENDPOINT")
    if kind == "openai":
        if not model:
            raise BackendConfigError("the openai backend needs the served model name: set WEBRL_ACTOR__MODEL")
        from webrl.models.backends.openai_compat import OpenAIBackend

        return OpenAIBackend(endpoint, model, api_key=settings.actor.api_key)
    if kind == "tgi":
        from webrl.models.backends.tgi import TGIBackend

        return TGIBackend(endpoint, api_key=settings.actor.api_key)
    raise BackendConfigError(f"unknown backend {kind!r}; expected local, openai or tgi")
