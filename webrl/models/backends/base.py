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


class BackendConfigError(ValueError):
    """Settings do not describe a usable backend; the message names the missing setting."""
