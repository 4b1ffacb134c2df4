"""Policies backed by models: :class:`LocalModelPolicy` (a checkpoint folder in this process) and
:class:`ActorEndpointPolicy` (an actor service's ``POST /v1/act``). Both implement
:class:`webrl.agent.policy.Policy`; the browser pool hands them one batch of requests per step."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from webrl.agent.policy import PolicyRequest, PolicyResponse
from webrl.config import Settings
from webrl.model_folders import written_stamp
from webrl.models.backends import Generation
from webrl.models.backends.local import LocalBackend
from webrl.prompts.actor import render_actor_prompt
from webrl.safety.credentials import actor_headers
from webrl.wire.contracts import ActItem, ActRequest, ActResponse


def prompt_budget(settings: Settings, max_positions: int | None, max_new_tokens: int) -> int:
    """Prompt tokens allowed: the configured budget, within the model's context after the generation."""
    budget = settings.actor.max_prompt_tokens
    if max_positions:
        budget = min(budget, max_positions - max_new_tokens)
    return max(1, budget)


def actor_prompt(tokenizer: Any, item: ActItem, budget: int) -> str:
    """The chat-template actor prompt of one step, within ``budget`` tokens."""
    return render_actor_prompt(tokenizer, item.intent, item.history, item.observation.html, max_tokens=budget)


#: Backends kept loaded across policies of the same folder (rollout jobs come in chunks of one checkpoint).
_SHARED: OrderedDict[tuple[str, int, str, str], LocalBackend] = OrderedDict()
#: Leases held on each loaded backend (by id): a backend evicted from ``_SHARED`` while leased closes at its last
#: release, so a rollout that still decodes on it is never handed a closed backend mid-episode.
_LEASES: dict[int, int] = {}
_SHARED_LOCK = threading.Lock()
MAX_SHARED_BACKENDS = 2  # the actor and, during a phase, the previous one


def acquire_backend(path: str | Path, settings: Settings) -> LocalBackend:
    """A loaded backend for ``path``, leased until :func:`release_backend`: reused while the folder is unchanged
    (keyed by :func:`~webrl.model_folders.written_stamp`: a folder republished in place is loaded again). Loading a
    third folder evicts the least recently used one; an evicted backend closes once nobody leases it."""
    folder = Path(path).resolve()
    key = (str(folder), written_stamp(folder), settings.models.dtype, settings.models.device)
    with _SHARED_LOCK:
        if key in _SHARED:
            _SHARED.move_to_end(key)
            backend = _SHARED[key]
        else:
            backend = _SHARED[key] = LocalBackend.from_path(folder, settings)
        _LEASES[id(backend)] = _LEASES.get(id(backend), 0) + 1
        evicted = []
        while len(_SHARED) > MAX_SHARED_BACKENDS:
            old = _SHARED.popitem(last=False)[1]
            if not _LEASES.get(id(old)):
                evicted.append(old)
    for old in evicted:  # outside the lock: close() finishes the queued requests
        old.close()
    return backend


def release_backend(backend: LocalBackend) -> None:
    """End one lease of :func:`acquire_backend`; the backend closes here when it was evicted and this was the last."""
    with _SHARED_LOCK:
        left = _LEASES.get(id(backend), 0) - 1
        if left > 0:
            _LEASES[id(backend)] = left
            return
        _LEASES.pop(id(backend), None)
        evicted = backend not in _SHARED.values()
    if evicted:
        backend.close()


@contextmanager
def leased_backend(path: str | Path, settings: Settings) -> Iterator[LocalBackend]:
    """:func:`acquire_backend` for the block."""
    backend = acquire_backend(path, settings)
    try:
        yield backend
    finally:
        release_backend(backend)


def loaded_backends() -> list[LocalBackend]:
    """The backends :func:`acquire_backend` holds loaded now, least recently used first."""
    with _SHARED_LOCK:
        return list(_SHARED.values())


def step_seed(seed: int, request: PolicyRequest) -> int:
    """The sampling seed of one step: ``seed`` (a rollout's), the task (its id and intent: not its URLs, whose ports
    are the machine's) and the step's index in the episode, hashed to 63 bits."""
    task = f"{request.task.task_id}\0{request.intent}"
    digest = hashlib.sha256(f"{seed}\0{task}\0{len(request.history)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class LocalModelPolicy:
    """The actor as a checkpoint folder loaded here (``{"kind": "checkpoint", "path": ...}``). With a ``seed``, each
    sampled step draws from a generator seeded by :func:`step_seed`: an episode's actions are then the same whichever
    episodes share its batches (given batch-invariant logits: fp32), so a run's rollouts repeat."""

    def __init__(self, path: str | Path, settings: Settings, *, temperature: float | None = None,
                 max_new_tokens: int | None = None, backend: LocalBackend | None = None,
                 seed: int | None = None) -> None:
        self.seed = seed
        self.settings = settings
        self._leased = backend is None  # a backend given is the caller's to close
        self.backend = backend or acquire_backend(path, settings)
        self.temperature = settings.actor.temperature if temperature is None else temperature
        self.max_new_tokens = max_new_tokens or settings.actor.max_new_tokens
        self.budget = prompt_budget(settings, self.backend.max_positions, self.max_new_tokens)

    @property
    def version(self) -> str:
        return self.backend.version

    def close(self) -> None:
        """End the policy's lease of its shared backend (:func:`release_backend`). Safe to call twice."""
        if self._leased:
            self._leased = False
            release_backend(self.backend)

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        prompts = [actor_prompt(self.backend.tokenizer, ActItem.of(r), self.budget) for r in requests]
        seeds = [step_seed(self.seed, r) if self.seed is not None else None for r in requests]
        futures = [asyncio.wrap_future(self.backend.submit(p, self.max_new_tokens, self.temperature, seed))
                   for p, seed in zip(prompts, seeds, strict=True)]
        generations: list[Generation] = await asyncio.gather(*futures)
        return [PolicyResponse(response=g.text, token_ids=g.token_ids, logprobs=g.logprobs, version=self.version)
                for g in generations]

class ActorChanged(RuntimeError):
    """The actor service answered with another checkpoint than the rollout's: asked to serve another meanwhile."""


class ActorEndpointPolicy:
    """The actor behind an actor service (``{"kind": "endpoint", "url": ...}``): one ``/v1/act`` per batch.
    The bearer key (``actor.api_key``, else the services' ``security.api_key``) goes only to the
    configured ``actor.url``, never to another endpoint. With ``version``, a batch answered by another checkpoint
    raises :class:`ActorChanged`: the episode is not stored as this actor's (its job fails; a retry serves it again)."""

    def __init__(self, url: str, settings: Settings, *, temperature: float | None = None,
                 max_new_tokens: int | None = None, timeout: float = 300.0, version: str | None = None) -> None:
        self.url = url.rstrip("/") + "/v1/act"
        self.version = version
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self._headers = actor_headers(settings, url)
        self._timeout = timeout

    async def act(self, requests: list[PolicyRequest]) -> list[PolicyResponse]:
        body = ActRequest(batch=[ActItem.of(r) for r in requests], temperature=self.temperature,
                          max_new_tokens=self.max_new_tokens)
        async with httpx.AsyncClient(timeout=self._timeout, headers=self._headers) as client:
            reply = await client.post(self.url, json=body.model_dump(mode="json"))
        reply.raise_for_status()
        result = ActResponse.model_validate(reply.json())
        if self.version is not None and result.version != self.version:
            raise ActorChanged(f"the actor service at {self.url} answered with checkpoint {result.version!r}, not "
                               f"the rollout's {self.version!r}: something asked it to serve another actor meanwhile")
        return [r.policy_response() for r in result.results]
