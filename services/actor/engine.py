"""The actor engine: the current backend, swapped atomically on hot reload without dropping requests.

Every request leases the backend it starts with and keeps it to the end; a swap installs the new backend for
later requests and retires the old one once its last lease is returned: closes it, and for the openai backend on a
hot-loaded LoRA adapter unloads that adapter from the server (no rollout uses it any more).

Hot reload: the local backend loads the checkpoint folder in this process. The openai backend (vLLM) loads an
adapter checkpoint into the running server under the checkpoint's version and routes later requests to it; a
full-weight checkpoint is the server's to restart on (``docker/vllm_supervisor.py``), so the engine routes back
to the server's own model name and reports what the server says it holds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from webrl.agent.actions import ActionParseError, parse_action
from webrl.config import Settings
from webrl.model_folders import is_adapter
from webrl.models.backends import Backend, Generation, make_backend
from webrl.models.backends.local import LocalBackend
from webrl.models.loading import checkpoint_version, load_tokenizer
from webrl.models.model_policies import actor_prompt, prompt_budget
from webrl.text import without_nul
from webrl.wire.contracts import ActRequest, ActResponse, ActResult

log = logging.getLogger("webrl.actor")


@dataclass
class LogprobResult:
    """lp = sum_t log pi(a_t | s, a_<t) over the completion tokens (end of turn included); n tokens."""

    sum_logprob: float
    n_tokens: int
    mean_logprob: float
    confidence: float  # 1 / perplexity = exp(lp / n): the replay filter's score (docs/design.md step 4)
    token_logprobs: list[float]


class EngineUnavailableError(RuntimeError):
    """The operation needs the local backend (a model in this process)."""


class ActorEngine:
    """Owns the serving backend; hands out leases; swaps checkpoints."""

    def __init__(self, settings: Settings, backend: Backend, tokenizer: Any, *, path: str = "") -> None:
        self.settings = settings
        self._backend = backend
        self.tokenizer = tokenizer
        self.path = path
        self._lock = threading.Lock()
        self.scoring = threading.Lock()  # one log-probs forward pass at a time, beside generation's worker
        self._leases: dict[int, int] = {}
        self._retired: dict[int, Backend] = {}
        self.reloads = 0
        self.tokens_generated = 0  # by every backend this engine served with (Prometheus: a counter)

    @classmethod
    def from_settings(cls, settings: Settings) -> ActorEngine:
        backend = make_backend(settings)
        if isinstance(backend, LocalBackend):
            return cls(settings, backend, backend.tokenizer, path=backend.path)
        if not settings.actor.model or not Path(settings.actor.model).is_dir():
            raise EngineUnavailableError("a remote backend still renders prompts with the model's chat template: "
                                         "WEBRL_ACTOR__MODEL must be the local folder of the served model")
        return cls(settings, backend, load_tokenizer(settings.actor.model, settings), path=settings.actor.model)

    # Leases and swaps
    @property
    def backend(self) -> Backend:
        return self._backend

    @property
    def version(self) -> str:
        return self._backend.version

    @property
    def in_flight(self) -> int:
        with self._lock:
            return sum(self._leases.values())

    @contextmanager
    def lease(self) -> Iterator[Backend]:
        """The current backend, kept alive (not closed by a swap) until the block ends."""
        with self._lock:
            backend = self._backend
            self._leases[id(backend)] = self._leases.get(id(backend), 0) + 1
        try:
            yield backend
        finally:
            self._release(backend)

    def _release(self, backend: Backend) -> None:
        close = False
        with self._lock:
            key = id(backend)
            self._leases[key] -= 1
            if self._leases[key] == 0:
                del self._leases[key]
                close = self._retired.pop(key, None) is not None
        if close:
            self._retire(backend)

    def swap(self, backend: Backend, tokenizer: Any | None = None, path: str = "") -> str:
        """Serve ``backend`` from now on; the old one closes when its last request finishes."""
        with self._lock:
            old, self._backend = self._backend, backend
            if tokenizer is not None:
                self.tokenizer = tokenizer
            self.path = path or self.path
            self.reloads += 1
            idle = id(old) not in self._leases
            if not idle:
                self._retired[id(old)] = old
        if idle:
            self._retire(old)
        log.info("serving actor %s (was %s)", backend.version, old.version)
        return backend.version

    def _retire(self, backend: Backend) -> None:
        """Close a backend no request uses any more, in a thread: this may run on the event loop (a request's lease
        ending), and a local backend's close joins its decoding worker, a remote backend's ``retire`` (unloading its
        adapter from the server) is an HTTP call. An adapter the current backend routes to again is never unloaded."""
        retire = getattr(backend, "retire", None)
        adapter = getattr(backend, "adapter", None)
        unload = retire is not None and adapter is not None and adapter != getattr(self._backend, "adapter", None)
        threading.Thread(target=retire if unload else backend.close, name="retire-backend", daemon=True).start()

    def reload(self, path: str, version: str | None = None) -> str:
        """Serve the checkpoint folder ``path``: loaded by the local backend, or (openai backend) an adapter
        hot-loaded into the server; a full-weight folder on the openai backend is the server's to restart on."""
        current = self._backend
        if isinstance(current, LocalBackend):
            backend = LocalBackend.from_path(path, self.settings, version=version)
            return self.swap(backend, backend.tokenizer, path)
        with_adapter = getattr(current, "with_adapter", None)
        if with_adapter is None:
            raise EngineUnavailableError(f"the {current.name} backend cannot load checkpoints into its server: "
                                         "the server reloads them itself")
        if is_adapter(path):
            return self.swap(with_adapter(path, version or checkpoint_version(path)), path=path)
        # a full-weight checkpoint: vLLM's supervisor restarts the server on it under the served name
        log.info("actor %s is full-weight: the %s server restarts on it (docker/vllm_supervisor.py)",
                 version or path, current.name)
        if getattr(current, "adapter", None) is not None:
            return self.swap(current.without_adapter(), path=self.settings.actor.model or self.path)
        return current.version

    # Generation
    async def complete(self, prompts: list[str], max_new_tokens: int, temperature: float,
                       seed: int | None = None) -> tuple[list[Generation], str]:
        """Complete raw prompts; returns the generations and the version that made them."""
        with self.lease() as backend:
            if isinstance(backend, LocalBackend):
                futures = [asyncio.wrap_future(backend.submit(p, max_new_tokens, temperature, seed)) for p in prompts]
                generations = list(await asyncio.gather(*futures))
            else:
                generations = await asyncio.to_thread(backend.generate, prompts, max_new_tokens, temperature,
                                                      seed=seed)
            self.tokens_generated += sum(len(g.token_ids) for g in generations)
            return generations, backend.version

    def prompt_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    async def act(self, request: ActRequest) -> ActResponse:
        """One action per item: prompt through the chat template, generate, parse."""
        settings = self.settings
        max_new = request.max_new_tokens or settings.actor.max_new_tokens
        temperature = settings.actor.temperature if request.temperature is None else request.temperature
        max_positions = getattr(self._backend, "max_positions", None)
        budget = prompt_budget(settings, max_positions, max_new)
        tokenizer = self.tokenizer
        # rendering and tokenising run in a thread: a long history or page must not stall the event loop
        prompts = await asyncio.to_thread(lambda: [actor_prompt(tokenizer, item, budget) for item in request.batch])
        generations, version = await self.complete(prompts, max_new, temperature, request.seed)
        results = await asyncio.to_thread(
            lambda: [self._result(g, p, version) for g, p in zip(generations, prompts, strict=True)])
        return ActResponse(results=results, version=version)

    def _result(self, generation: Generation, prompt: str, version: str) -> ActResult:
        """The parsed action of one generation. Its text loses NUL characters (``webrl.text``): the response comes
        back as history in the episode's next request, which a service would refuse with them."""
        text = without_nul(generation.text) or ""
        action, error = None, None
        try:
            action = parse_action(text)
        except ActionParseError as exc:
            error = str(exc)
        return ActResult(response=text, action=action, parse_error=error, token_ids=generation.token_ids,
                         logprobs=generation.logprobs, prompt_tokens=self.prompt_tokens(prompt), version=version)

    # Scoring
    def logprobs(self, pairs: list[tuple[str, str]]) -> tuple[list[LogprobResult], str]:
        """Log-probs of each completion (end of turn appended) after its prompt, under the served model."""
        from webrl.models.examples import collate, encode_example, pad_id_of
        from webrl.models.logprobs import confidence, token_logprobs

        with self.lease() as backend:
            if not isinstance(backend, LocalBackend):
                raise EngineUnavailableError("log-probs need the model in this process (the local backend)")
            examples = [encode_example(backend.tokenizer, p, c, max_length=backend.max_positions) for p, c in pairs]
            batch = {k: v.to(backend.model.device) for k, v in collate(examples, pad_id_of(backend.tokenizer)).items()}
            with torch.no_grad():
                per_token = token_logprobs(backend.model, batch["input_ids"], batch["attention_mask"],
                                           batch["target_mask"])  # (B, T)
            results = []
            for row, example in zip(per_token.tolist(), examples, strict=True):
                picked = [lp for lp, m in zip(row, example.target_mask, strict=False) if m]
                total, n = float(sum(picked)), len(picked)
                c = float(confidence(torch.tensor(total), torch.tensor(n)))
                results.append(LogprobResult(sum_logprob=total, n_tokens=n, mean_logprob=total / max(n, 1),
                                             confidence=c, token_logprobs=picked))
            return results, backend.version

    def describe(self) -> dict[str, Any]:
        """What ``GET /v1/model`` reports. A remote backend is asked which checkpoint its server holds first (the
        version its generations are then labelled with): the server reloads on its own (vLLM's supervisor)."""
        backend = self._backend
        info: dict[str, Any] = {}
        refresh = getattr(backend, "refresh_version", None)
        if refresh is not None:
            try:
                refresh()
                info["server_error"] = None
            except Exception as exc:  # the server restarting on a new checkpoint; the last known version stands
                info["server_error"] = f"cannot ask {backend.name} server which checkpoint it serves: {exc}"
        info.update({"version": backend.version, "backend": backend.name, "path": self.path,
                     "reloads": self.reloads, "in_flight": self.in_flight})
        if isinstance(backend, LocalBackend):
            dtype = str(backend.model.dtype).removeprefix("torch.")
            info.update(parameters=backend.model.num_parameters(), dtype=dtype, device=str(backend.model.device),
                        max_positions=backend.max_positions,
                        max_batch=backend.max_batch, model_type=backend.model.config.model_type)
        return info

    def close(self) -> None:
        self._backend.close()
