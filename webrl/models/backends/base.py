"""The interface every inference backend implements (:class:`Backend`) and what it returns (:class:`Generation`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


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


def version_served(name: str) -> str:
    """The version of what a model server reports it serves: when ``name`` is a checkpoint folder this process
    can read (vLLM's ``/v1/models`` ``root``, TGI's ``/info`` ``model_id``, both the folder the server loaded), the
    version the folder declares; else ``name`` itself."""
    from pathlib import Path

    try:
        if not Path(name).is_dir():
            return name
    except OSError:
        return name
    from webrl.models.loading import checkpoint_version  # lazily: torch

    return checkpoint_version(name)


class BackendConfigError(ValueError):
    """Settings do not describe a usable backend; the message names the missing setting."""
