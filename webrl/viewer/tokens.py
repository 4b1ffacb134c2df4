"""Token ids back to text for the log-prob heat map: the tokenizer of the actor version that generated them.

A version is found among the published checkpoints (``checkpoints``: role actor) and the starting actors of the
stored runs (their folders declare their version, :func:`webrl.models.loading.checkpoint_version`). Tokenizers
load once per folder; a version whose folder is gone decodes to nothing (the heat map then shows token ids).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from webrl.config import Settings
from webrl.db import models as m
from webrl.serving.kept_models import KeptModels

log = logging.getLogger(__name__)

Decode = Callable[[int], str]


def actor_folder(session: Session, version: str) -> Path | None:
    """The folder of actor ``version``: a published checkpoint's, else a run's starting actor that declares it."""
    from webrl.models.loading import checkpoint_version

    published = session.scalar(select(m.Checkpoint.path).where(m.Checkpoint.role == "actor",
                                                               m.Checkpoint.version == version))
    if published and Path(published).is_dir():
        return Path(published)
    for options in session.scalars(select(m.Run.options)):
        start = (options or {}).get("actor")
        if start and Path(start).is_dir() and checkpoint_version(start) == version:
            return Path(start)
    return None


#: folder -> its tokenizer's decode (None: it has none that loads): the most recently viewed few (a run has an actor
#: folder a phase, and a tokenizer is tens of MB)
_DECODERS: KeptModels[str, Decode | None] = KeptModels(size=8)


def _decoder(folder: str, settings: Settings) -> Decode | None:
    from webrl.models.loading import load_tokenizer

    def load() -> Decode | None:
        try:
            tokenizer = load_tokenizer(folder, settings)
        except (OSError, ValueError) as exc:
            log.info("no tokenizer in %s: %s", folder, exc)
            return None
        return lambda token_id: tokenizer.decode([token_id])

    return _DECODERS.get(folder, load)


def decoder_for(session: Session, settings: Settings) -> Callable[[str], Decode | None]:
    """``version -> decode`` (None when the version's tokenizer cannot be found)."""

    def decoder(version: str) -> Decode | None:
        folder = actor_folder(session, version) if version else None
        return _decoder(str(folder), settings) if folder else None

    return decoder
