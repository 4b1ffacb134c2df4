"""A tiny real Llama and its BPE tokenizer for the shared model utilities' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = ['<a id="3">Electronics</a> Show me the products', 'do(action="Click", element="3")', 'exit(message="ok")'] * 4


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from webrl.models.tiny import build_tiny_llama, build_tokenizer, save_tiny

    out = tmp_path_factory.mktemp("tiny-shared")
    tokenizer = build_tokenizer(CORPUS, out, vocab_size=500)
    save_tiny(build_tiny_llama(tokenizer, "test", seed=1), tokenizer, out)
    return out


@pytest.fixture(scope="session")
def tiny_lm(tiny_folder: Path):
    """(model in eval mode, tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_folder, local_files_only=True, dtype=torch.float32).eval()
    return model, tokenizer
