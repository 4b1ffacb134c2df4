"""The tiny tokenizer and model: grounding-friendly tokens, deterministic builds, a plain HF folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from webrl.config import Settings
from webrl.models.loading import ModelNotFoundError, load_causal_lm
from webrl.models.tiny import MAX_SINGLE_TOKEN_ID, SIZES, build_tiny_folder, build_tiny_llama, build_tokenizer

CORPUS = ['Show me "Electronics" in the catalog', '<a id="5">Electronics</a><span>"Books"</span>'] * 10


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    return build_tokenizer(CORPUS, tmp_path_factory.mktemp("tok"), vocab_size=1200)


def test_a_word_has_the_same_tokens_in_intent_and_page(tokenizer) -> None:
    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    word = ids("Electronics")
    assert len(word) == 1
    for context in ('<a id="5">Electronics</a>', 'Show me "Electronics"', "in Electronics."):
        tokens = ids(context)
        assert any(tokens[i:i + len(word)] == word for i in range(len(tokens)))


def test_trailing_space_words_read_alike_in_intent_argument_and_page(tmp_path: Path) -> None:
    """With ``words="trailing-space"`` a multi-word name has the same tokens where the intent asks for it, where
    the action types it and in the page's element, up to its last word, and each word token carries its space."""
    corpus = ['What is the price of Solace Body Mist, White?', '<a id="8"> Solace Body Mist, White </a>',
              'do(action="Search", argument="Solace Body Mist, White", element="1")'] * 20
    tok = build_tokenizer(corpus, tmp_path, vocab_size=1200, words="trailing-space")

    def pieces(text: str) -> list[str]:
        return tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])

    name = pieces("Solace Body Mist")
    assert name == ["SolaceĠ", "BodyĠ", "Mist"]
    for context in corpus[:3]:
        tokens = pieces(context)
        assert any(tokens[i:i + 3] == name for i in range(len(tokens))), context
    with pytest.raises(ValueError, match="word tokenisation"):
        build_tokenizer(corpus, tmp_path / "x", words="glued")


def test_element_ids_are_single_tokens(tokenizer) -> None:
    for n in range(MAX_SINGLE_TOKEN_ID + 1):
        assert len(tokenizer(str(n), add_special_tokens=False)["input_ids"]) == 1, n
    for special in ("<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>"):
        assert tokenizer.convert_tokens_to_ids(special) != tokenizer.unk_token_id
    assert tokenizer.eos_token == "<|eot_id|>"


def test_orm_answers_are_single_tokens(tokenizer) -> None:
    """The ORM reads p = softmax over the YES and NO logits: each answer must be exactly one token."""
    for answer in ("YES", "NO"):
        assert len(tokenizer(answer, add_special_tokens=False)["input_ids"]) == 1, answer


def test_tokenizer_round_trips_text(tokenizer) -> None:
    text = 'do(action="Type", argument="café → 12,5 €", element="22")\n  exit(message="ok")'
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_build_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    a = build_tiny_folder(CORPUS, tmp_path / "a", size="test", vocab_size=1200, seed=7)
    b = build_tiny_folder(CORPUS, tmp_path / "b", size="test", vocab_size=1200, seed=7)
    c = build_tiny_folder(CORPUS, tmp_path / "c", size="test", vocab_size=1200, seed=8)
    wa, wb, wc = (load_file(p / "model.safetensors") for p in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()


def test_sizes_grow(tokenizer) -> None:
    counts = [build_tiny_llama(tokenizer, name).num_parameters() for name in SIZES]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)


def test_folder_loads_with_dtype_and_never_downloads(tiny_dir: Path, settings: Settings) -> None:
    model, tokenizer = load_causal_lm(tiny_dir, settings)
    assert model.dtype == torch.float32 and not model.training
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<|pad|>"
    bf16 = settings.replace(models={"dtype": "bfloat16"})
    assert load_causal_lm(tiny_dir, bf16)[0].dtype == torch.bfloat16
    with pytest.raises(ModelNotFoundError, match="local folders only"):
        load_causal_lm("meta-llama/Llama-3.1-8B-Instruct", settings)
