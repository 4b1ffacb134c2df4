from __future__ import annotations

from pathlib import Path

import pytest

from webrl.models.tiny import build_tiny_folder

CORPUS = [
    "Show me the products in the Electronics category",
    '<html> <a id="3"> Electronics </a> <a id="4"> Books </a> <button id="17"> Add to Cart </button> </html>',
    'do(action="Click", element="3")',
] * 30


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 'test'-size tiny Llama folder."""
    return build_tiny_folder(CORPUS, tmp_path_factory.mktemp("tiny") / "model", size="test", vocab_size=1200,
                             seed=3)
