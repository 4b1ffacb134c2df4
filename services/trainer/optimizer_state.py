"""The actor's AdamW state carried from one phase to the next (``actor.optimizer_state``: "keep"), or not ("reset",
the default: the published WebRL scripts start every phase's training afresh).

What carries over is the optimizer's per-parameter state: AdamW's first and second moments m, v and its step count
t, whose bias corrections 1 - beta^t then continue instead of restarting at t = 1. The phase's own hyperparameters
(lr, weight decay, betas) and its warm-up are not taken from the stored state: only ``state`` is loaded, the param
groups stay this phase's.

Where it is kept: ``<artifacts>/optimizer-states/<actor version>.pt``, under the version of the actor it was trained
into, so the phase that starts from that actor finds it by the actor's version (a phase whose actor was kept,
``actor.min_new_positive_steps``, stores the state it started from under its own version). It is written before the
actor is published, so a published actor trained under "keep" always has its state (a phase killed in between
retrains and writes it again). Under DeepSpeed ZeRO the optimizer's state is partitioned across the processes and is
not carried (a clear error, never a silent reset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from webrl.config import Settings
from webrl.whole_files import written_whole

#: The folder under the artifacts that holds the states.
FOLDER = "optimizer-states"


def state_path(settings: Settings, version: str) -> Path:
    """Where the optimizer state of the actor checkpoint ``version`` is kept."""
    assert settings.artifacts_dir is not None
    return settings.artifacts_dir / FOLDER / f"{version}.pt"


def _parameters(optimizer: Any) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def save_state(settings: Settings, optimizer: Any, version: str) -> Path:
    """Write ``optimizer``'s per-parameter state under ``version`` (atomically: a reader never sees half a file)."""
    path = state_path(settings, version)
    state = optimizer.state_dict()["state"]
    shapes = [list(p.shape) for p in _parameters(optimizer)]
    with written_whole(path) as partial:
        torch.save({"state": state, "shapes": shapes}, partial)
    return path


def load_state(settings: Settings, optimizer: Any, version: str | None) -> bool:
    """Load the state stored under ``version`` into ``optimizer`` (its param groups kept); False when none is stored
    (the SFT actor, or an actor trained under "reset"). ``ValueError`` when it was saved for other parameters."""
    if version is None or not state_path(settings, version).is_file():
        return False
    stored = torch.load(state_path(settings, version), map_location="cpu", weights_only=True)
    shapes = [list(p.shape) for p in _parameters(optimizer)]
    if stored["shapes"] != shapes:
        raise ValueError(f"the optimizer state of actor {version} was saved for {len(stored['shapes'])} parameters "
                         f"of other shapes than the {len(shapes)} trained now; start with actor.optimizer_state "
                         "reset")
    current = optimizer.state_dict()
    optimizer.load_state_dict({"state": stored["state"], "param_groups": current["param_groups"]})
    return True
