"""Fixtures for the judges' tests: a tiny real Llama and a byte-level BPE tokenizer with Llama-3's special
tokens and chat layout, built here (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "<|pad|>", "<|reserved_special_token_0|>"]
CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|pad|>", "<|endoftext|>"]
CORPUS = [
    "The User Intent: Add the blue kettle to the cart. Action History: do(action=\"Click\", element=\"7\")",
    "The Current Screenshot: <html><div id=\"5\">Order placed</div><div id=\"6\">Error</div></html>",
    "YES NO YES NO You are an expert in evaluating the performance of a website navigation agent.",
    "exit(message=\"done\") # Element: the search box do(action=\"Type\", argument=\"kettle\", element=\"13\")",
    "Task Instruction: Round 0 ** Simplified html ** products category price review order cart",
]


def build_tokenizer(out_dir: Path, specials: list[str], template: str, bos: str | None, eos: str) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos, pad_token="<|pad|>")
    fast.chat_template = template
    fast.save_pretrained(str(out_dir))
    return fast


def build_tiny_llama(tokenizer: object, out_dir: Path, seed: int = 0) -> object:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return model


@pytest.fixture(scope="session")
def tiny_llama3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, object]:
    """(folder, model, tokenizer) of a tiny Llama with a Llama-3-layout tokenizer."""
    out = tmp_path_factory.mktemp("tiny_llama3")
    tokenizer = build_tokenizer(out, LLAMA3_SPECIALS, LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>")
    model = build_tiny_llama(tokenizer, out)
    return out, model, tokenizer


@pytest.fixture(scope="session")
def chatml_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> object:
    out = tmp_path_factory.mktemp("tiny_chatml")
    return build_tokenizer(out, CHATML_SPECIALS, CHATML_TEMPLATE, None, "<|im_end|>")
