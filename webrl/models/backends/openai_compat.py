"""The ``openai`` backend: any OpenAI-compatible completions server (vLLM, SGLang, TGI, a webrl actor).

Which checkpoint the server holds comes from ``GET /v1/models``: vLLM lists each served name with its ``root``,
the folder it loaded (``docker/vllm_supervisor.py`` restarts vLLM on each new full-weight actor folder under the
same served name; a LoRA adapter's ``root`` is its folder), and a folder's declared version is the checkpoint's
version (:meth:`OpenAIBackend.refresh_version`).

Adapter checkpoints are hot-loaded into the running server (vLLM started with ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``): :meth:`OpenAIBackend.with_adapter` loads the folder with
``POST /v1/load_lora_adapter`` under the checkpoint's version as its model name and returns a backend whose
completions ask for that name; :meth:`OpenAIBackend.retire` unloads it (``POST /v1/unload_lora_adapter``) once the
actor engine no longer routes any request to it. A completion refused because the server does not know the adapter
(vLLM restarted, or another actor replica unloaded it) loads it again and is retried once.

It asks for log-probs (``logprobs=1``) and for token ids (``return_tokens_as_token_ids``, vLLM's extension:
tokens come back as ``"token_id:<id>"``); a server that ignores the extension but returns ``token_ids``
on the choice is read too. Without either, ids come from the local tokenizer if one was given.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import httpx
import openai

from webrl.models.backends.base import Generation, version_served

log = logging.getLogger("webrl.models.backends.openai")

TOKEN_ID_PREFIX = "token_id:"  # vLLM's `return_tokens_as_token_ids` token spelling
ADAPTER_TIMEOUT_S = 120.0  # one load or unload: vLLM reads the adapter's weights from disk


class AdapterLoadError(RuntimeError):
    """The server refused to load or could not find an adapter; the message is the server's."""


@dataclass(frozen=True)
class Adapter:
    """A LoRA adapter hot-loaded into the server: the model name completions ask for and its folder."""

    name: str
    path: str


def _v1(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith("/v1") else f"{base}/v1"


class OpenAIBackend:
    """Completions through the official ``openai`` client."""

    name = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 120.0,
                 tokenizer: Any = None, served_name: str | None = None, adapter: Adapter | None = None) -> None:
        self.base_url, self.api_key, self.timeout = _v1(base_url), api_key, timeout
        self.client = openai.OpenAI(base_url=self.base_url, api_key=api_key or "EMPTY", timeout=timeout,
                                    max_retries=2)
        self.model = model
        self.version = model
        self.tokenizer = tokenizer
        self.served_name = served_name or model  # the name the server was started with (not an adapter's)
        self.adapter = adapter

    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float, *,
                 seed: int | None = None) -> list[Generation]:
        try:
            response = self._complete(prompts, max_new_tokens, temperature, seed)
        except openai.NotFoundError:
            if self.adapter is None:
                raise
            log.warning("the server does not know adapter %s: loading it again from %s", self.adapter.name,
                        self.adapter.path)
            self.load_adapter(self.adapter)
            response = self._complete(prompts, max_new_tokens, temperature, seed)
        choices = sorted(response.choices, key=lambda c: c.index)
        return [self._generation(choice) for choice in choices]

    def _complete(self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int | None) -> Any:
        return self.client.completions.create(
            model=self.model, prompt=prompts, max_tokens=max_new_tokens, temperature=temperature, logprobs=1,
            seed=seed, extra_body={"return_tokens_as_token_ids": True},
        )

    # LoRA adapters (vLLM's runtime LoRA routes)
    def _post(self, route: str, body: dict[str, str]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            return httpx.post(f"{self.base_url}/{route}", json=body, headers=headers, timeout=ADAPTER_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise AdapterLoadError(f"POST {self.base_url}/{route} failed: {exc}") from exc

    def load_adapter(self, adapter: Adapter) -> None:
        """Load ``adapter`` into the server under its name; one already loaded under that name is kept."""
        reply = self._post("load_lora_adapter", {"lora_name": adapter.name, "lora_path": adapter.path})
        if reply.is_success:
            log.info("loaded adapter %s from %s", adapter.name, adapter.path)
            return
        if reply.status_code == 400 and "already been loaded" in reply.text:
            return
        raise AdapterLoadError(f"the server at {self.base_url} did not load adapter {adapter.name} from "
                               f"{adapter.path}: {reply.status_code} {_message(reply)}")

    def unload_adapter(self, name: str) -> bool:
        """Unload the adapter ``name``; False when the server did not hold it."""
        reply = self._post("unload_lora_adapter", {"lora_name": name})
        if reply.is_success:
            log.info("unloaded adapter %s", name)
            return True
        if reply.status_code in (400, 404):
            return False
        raise AdapterLoadError(f"the server at {self.base_url} did not unload adapter {name}: "
                               f"{reply.status_code} {_message(reply)}")

    def _sibling(self, model: str, adapter: Adapter | None) -> OpenAIBackend:
        return OpenAIBackend(self.base_url, model, api_key=self.api_key, timeout=self.timeout,
                             tokenizer=self.tokenizer, served_name=self.served_name, adapter=adapter)

    def with_adapter(self, path: str, version: str) -> OpenAIBackend:
        """A backend on the same server whose completions are made by the adapter folder ``path``, loaded now
        under ``version`` as its model name. Raises :class:`AdapterLoadError` when the server refuses it."""
        adapter = Adapter(name=version, path=path)
        self.load_adapter(adapter)
        backend = self._sibling(version, adapter)
        backend.version = version
        return backend

    def without_adapter(self) -> OpenAIBackend:
        """A backend on the same server asking for the name it was started with (a full-weight checkpoint, which
        the server is restarted on: ``docker/vllm_supervisor.py``)."""
        return self._sibling(self.served_name, None)

    def retire(self) -> None:
        """No request uses this backend any more: unload its adapter (a failure is logged) and close."""
        if self.adapter is not None:
            try:
                self.unload_adapter(self.adapter.name)
            except AdapterLoadError as exc:
                log.warning("%s", exc)
        self.close()

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
        no folder this process can read. With a hot-loaded adapter, its version, once the server lists it (loaded
        again first when the server lost it). Raises ``openai.OpenAIError`` when the server cannot be asked,
        :class:`AdapterLoadError` when it cannot load the adapter again."""
        models = list(self.client.models.list())
        if self.adapter is not None:
            if all(m.id != self.adapter.name for m in models):
                self.load_adapter(self.adapter)
            self.version = self.adapter.name
            return self.version
        chosen = next((m for m in models if m.id == self.model), models[0] if len(models) == 1 else None)
        root = (getattr(chosen, "model_extra", None) or {}).get("root") if chosen is not None else None
        self.version = version_served(str(root)) if root else self.model
        return self.version

    def close(self) -> None:
        self.client.close()


def _message(reply: httpx.Response) -> str:
    """The error message of a server's reply (OpenAI's ``{"error": {"message"}}``, else the text)."""
    try:
        return str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return reply.text[:500]


def _ids_from_tokens(tokens: list[str]) -> list[int] | None:
    if not tokens or not all(t.startswith(TOKEN_ID_PREFIX) for t in tokens):
        return None
    return [int(t[len(TOKEN_ID_PREFIX):]) for t in tokens]
