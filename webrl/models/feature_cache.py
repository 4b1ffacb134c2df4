"""Frozen-backbone features of prompts, kept on disk so that a head refitted on grown data reads only the new ones.

A classification-head ORM (:mod:`webrl.models.orm_head`) reads each prompt once with a frozen backbone: on a
2-core CPU ~1 prompt/s at 768 tokens, so 1,500 training trajectories cost ~25 minutes of forward passes, and a
rerun with 300 more trajectories would pay all of them again. The features depend only on the backbone's weights
and the prompt text (``prompt_features`` right-pads and reads the last real token, so a prompt's batch does not
change them beyond float rounding), so they are cached under that pair:

- one file per backbone, ``<folder>/<backbone key>.pt``: ``{"keys": [sha256(prompt)], "features": (N, H)}``;
- the backbone key hashes the folder's files and, for an adapter, the identity of the base it applies to;
- written whole to a temporary file and renamed, after every chunk of new prompts, so a crash keeps what was read.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

#: New prompts read between two saves of the cache file (~3 minutes of a 2-core CPU at 768 tokens).
SAVE_EVERY = 200


def backbone_key(folder: str | Path) -> str:
    """sha256 of a backbone folder's files and, for an adapter, of its base's identity (name and sha256)."""
    from webrl.model_folders import is_adapter
    from webrl.models.adapters import base_identity
    from webrl.store.checkpoints import folder_sha256

    identity = {"folder": folder_sha256(folder), "base": base_identity(Path(folder)) if is_adapter(folder) else None}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def prompt_key(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()


class FeatureCache:
    """The features of one backbone, by prompt (see the module docstring)."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.rows: dict[str, torch.Tensor] = {}
        if file.is_file():
            stored = torch.load(file, weights_only=True)
            self.rows = dict(zip(stored["keys"], stored["features"], strict=True))

    @classmethod
    def for_backbone(cls, folder: Path, backbone: str | Path) -> FeatureCache:
        return cls(folder / f"{backbone_key(backbone)}.pt")

    def __len__(self) -> int:
        return len(self.rows)

    def count_missing(self, prompts: Sequence[str]) -> int:
        """How many distinct prompts :meth:`features` would read."""
        return len({prompt_key(p) for p in prompts} - self.rows.keys())

    def save(self) -> None:
        """Write every row to :attr:`file` atomically (temporary file, then rename)."""
        if not self.rows:
            return
        self.file.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.rows)
        tmp = self.file.with_name(f"{self.file.name}.{os.getpid()}.tmp")
        torch.save({"keys": keys, "features": torch.stack([self.rows[k] for k in keys])}, tmp)
        tmp.replace(self.file)

    def features(self, prompts: Sequence[str], compute: Callable[[Sequence[str]], torch.Tensor],
                 save_every: int = SAVE_EVERY) -> torch.Tensor:
        """(N, H) features of ``prompts``: cached rows, and ``compute`` on the rest in chunks of ``save_every``
        distinct prompts, each chunk saved before the next starts."""
        keys = [prompt_key(p) for p in prompts]
        missing = list(dict.fromkeys(k for k in keys if k not in self.rows))
        text = dict(zip(keys, prompts, strict=True))
        for start in range(0, len(missing), save_every):
            chunk = missing[start:start + save_every]
            computed = compute([text[k] for k in chunk]).float().cpu()
            self.rows.update(zip(chunk, computed, strict=True))
            self.save()
        if not keys:
            return torch.zeros(0, 0)
        return torch.stack([self.rows[k] for k in keys])
