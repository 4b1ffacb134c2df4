"""The actor service as its clients reach it over HTTP (``settings.actor.url``): the bearer key it alone is
sent, the checkpoint it serves (``GET /v1/model``), and asking it to serve another one.

Every rollout of an actor folder (the pipeline's, ``webrl eval``'s, ``webrl bootstrap``'s evaluation) asks
:func:`rollout_policy` what to run: in the distributed mode the actor service (``{"kind": "endpoint"}``), after
:func:`serve_checkpoint` made it serve that folder; embedded, the folder loaded by the rollout job itself.
:func:`serve_checkpoint` is the wait: the actor
hot-reloads checkpoints announced on ``webrl:checkpoints`` (``services/actor/reload.py``), the trainer announces
each one it publishes, and the pipeline waits until the service *reports* the version the rollout needs, so the
rollouts of phase i+1 are made by phase i's actor. It announces the checkpoint itself when the service serves
another one (the SFT actor it was started with, a resumed run, a restarted service) and can load it: any folder on
the local backend, an adapter folder on the openai backend (hot-loaded into vLLM).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from webrl.config import Settings
from webrl.model_folders import is_adapter
from webrl.safety.credentials import actor_headers
from webrl.store.checkpoints import CHANNEL, CheckpointError, CheckpointInfo, announce, folder_sha256, read_manifest
from webrl.wire.contracts import CheckpointSpec, EndpointSpec, PolicySpec

log = logging.getLogger(__name__)

POLL_S = 0.5  # how often the wait asks the actor service what it serves
REQUEST_TIMEOUT_S = 10.0  # one GET /v1/model


class ActorNotServing(RuntimeError):
    """The actor service cannot be reached, or does not serve the checkpoint a rollout needs in time."""


@dataclass(frozen=True)
class Serving:
    """What ``GET /v1/model`` says the actor service serves."""

    version: str
    backend: str
    reload_error: str | None = None


def serving(settings: Settings) -> Serving:
    """The checkpoint the actor service at ``settings.actor.url`` serves now."""
    url = settings.actor.url.rstrip("/") + "/v1/model"
    try:
        reply = httpx.get(url, headers=actor_headers(settings, url), timeout=REQUEST_TIMEOUT_S)
        reply.raise_for_status()
    except httpx.HTTPError as exc:
        raise ActorNotServing(f"cannot ask the actor service what it serves (GET {url}, WEBRL_ACTOR__URL): "
                              f"{exc}") from exc
    body = reply.json()
    return Serving(version=str(body["version"]), backend=str(body.get("backend", "")),
                   reload_error=body.get("reload_error"))


def _event(path: str, version: str) -> CheckpointInfo:
    """The hot-reload event of the actor folder ``path``: its manifest's sha256 (what the trainer announced),
    else the folder's digest (an SFT folder published by hand)."""
    try:
        sha256 = str(read_manifest(path)["sha256"])
    except (CheckpointError, KeyError):
        sha256 = folder_sha256(path)
    return CheckpointInfo(role="actor", version=version, path=str(Path(path).resolve()), sha256=sha256)


def serve_checkpoint(settings: Settings, path: str, timeout_s: float, *, channel: str = CHANNEL) -> str:
    """Make the actor service serve the checkpoint folder ``path`` (announced on ``channel`` unless it serves it
    already); returns its version once the service reports it. Raises :class:`ActorNotServing` with the reason
    when it cannot, or not within ``timeout_s``."""
    from webrl.models.loading import checkpoint_version  # lazily: torch

    wanted = checkpoint_version(path)
    now = serving(settings)
    if now.version == wanted:
        return wanted
    where = f"the actor service at {settings.actor.url}"
    # The local backend loads any folder, the openai backend hot-loads an adapter into vLLM; a full-weight folder on
    # a model server is the server's to reload (docker/vllm_supervisor.py), and the service reports it.
    if now.backend != "local" and not (now.backend == "openai" and is_adapter(path)):
        return _wait_for(settings, wanted, path, timeout_s, f"{where} (its {now.backend} server serves "
                         f"{now.version!r}; a server reloads on its own once the trainer publishes {wanted!r}: "
                         "docker/vllm_supervisor.py)")
    if not announce(settings, _event(path, wanted), channel=channel):
        raise ActorNotServing(f"{where} serves {now.version!r}, not {wanted!r} ({path}), and without "
                              "WEBRL_JOBS__REDIS_URL the reload cannot be announced")
    log.info("asked %s to serve %s (it serves %s)", settings.actor.url, wanted, now.version)
    return _wait_for(settings, wanted, path, timeout_s, f"{where} ({wanted!r} was announced on {channel}; does it "
                     "listen on the same Redis (WEBRL_JOBS__REDIS_URL), and can it read that folder?)")


def _wait_for(settings: Settings, wanted: str, path: str, timeout_s: float, hint: str) -> str:
    """Poll ``GET /v1/model`` until the service reports ``wanted``; :class:`ActorNotServing` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    now = serving(settings)
    while now.version != wanted:
        if time.monotonic() >= deadline:
            reason = f"; its last reload failed: {now.reload_error}" if now.reload_error else ""
            raise ActorNotServing(f"still serving {now.version!r}, not {wanted!r} ({path}), {timeout_s:g} s on: "
                                  f"{hint}{reason} (the wait: WEBRL_ACTOR__RELOAD_TIMEOUT_S)")
        time.sleep(POLL_S)
        now = serving(settings)
    return wanted


def rollout_policy(settings: Settings, actor: str, temperature: float | None = None,
                   dtype: str | None = None) -> PolicySpec:
    """What a rollout of the actor folder ``actor`` runs: the actor service once it reports serving ``actor``
    (``Settings.rollouts_through_actor``, the distributed default: every step of every episode is then a batched
    ``POST /v1/act``), else the folder loaded by the rollout job itself. ``temperature`` None: the serving
    default (greedy unless ``WEBRL_ACTOR__TEMPERATURE`` says otherwise). ``dtype``: the dtype the rollout job loads the
    folder in (:class:`~webrl.wire.contracts.CheckpointSpec`; None: ``models.dtype``); an actor service serves in its
    own."""
    if not settings.rollouts_through_actor:
        return CheckpointSpec(path=actor, temperature=temperature, dtype=dtype)
    version = serve_checkpoint(settings, actor, settings.actor.reload_timeout_s)
    return EndpointSpec(temperature=temperature, version=version)  # every step from this actor, or the job fails
