"""An adapter merged into its base, written as a plain Hugging Face folder: what vLLM, SGLang and TGI serve
(``webrl models merge``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from webrl.config import Settings
from webrl.models.adapters import ADAPTER_FILE, load_merged
from webrl.models.loading import checkpoint_version, load_tokenizer, save_tokenizer
from webrl.store.checkpoints import publish_folder, store_relative


def merge_to_folder(adapter: str | Path, output: str | Path, settings: Settings, dtype: str = "bfloat16") -> Any:
    """Write base + adapter, merged, as a plain HF folder for vLLM/SGLang/TGI (published: manifest, sha256; its
    version is the adapter's with a ``-merged`` suffix)."""
    model = load_merged(adapter, settings, getattr(torch, dtype))
    tokenizer = load_tokenizer(adapter, settings)

    def write(folder: Path) -> None:
        model.save_pretrained(str(folder), safe_serialization=True)
        save_tokenizer(tokenizer, folder)

    record = json.loads((Path(adapter) / ADAPTER_FILE).read_text())
    return publish_folder(write, output, role="merged", version=f"{checkpoint_version(adapter)}-merged",
                          metrics={"adapter": store_relative(adapter, settings.artifacts_dir), "base": record["base"],
                                   "dtype": dtype},
                          store=settings.artifacts_dir)
