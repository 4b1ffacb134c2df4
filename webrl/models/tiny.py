"""The tiny CPU actor: a byte-level BPE tokenizer trained on the sandbox corpus and a small Llama.

Grounding (finding the element id for the words of the intent) is what a tiny model finds hard (it never copies
names from the intent: webrl/assets/PROVENANCE.md), so the tokenizer is built to make copying easy:

- words, digit runs, whitespace runs and single punctuation marks are pre-tokenised apart, so a word has the
  same tokens in the intent and in the page (``>Electronics<`` and ``Electronics`` share ``Electronics``);
- element ids ``0 .. MAX_SINGLE_TOKEN_ID`` are frequent enough in the corpus to become single tokens;
- Llama-3's special tokens, and a compact Llama-3-style chat template that drops the system turn (the tiny
  model has no room for WebRL's 4k-character system prompt; it is trained and run without it).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from webrl.agent.actions import Action, ActionType

BOS = "<|begin_of_text|>"
EOT = "<|eot_id|>"  # end of turn: the eos of generation, included in SFT targets
EOS = "<|end_of_text|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, "<|start_header_id|>", "<|end_header_id|>", EOT]

#: How text is cut before BPE. Either way merges never glue a word to the ``>`` or ``"`` before it.
#: - "apart": letters, digits, whitespace and punctuation apart: ``Body Mist`` is ``Body``, `` ``, ``Mist``;
#: - "trailing-space": a word keeps one space after it: ``Body Mist`` is ``Body ``, ``Mist``. A copied name
#:   then continues from its last token alone (``Body `` -> ``Mist``: the one-token look-back an induction head
#:   does), where "apart" needs two (``Body``, `` `` -> ``Mist``); the demo pages take 11% fewer tokens.
PRETOKENIZE_PATTERNS = {
    "apart": r"\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]",
    "trailing-space": r"\p{L}+ ?|\p{N}+|\s+|[^\s\p{L}\p{N}]",
}

MAX_SINGLE_TOKEN_ID = 400  # element ids up to this tokenise as one token (sandbox pages stay below ~300)
ID_REPEATS = 24  # copies of each id in the corpus: enough for BPE to merge every id into one token

#: The tiny model's chat template: Llama-3 headers, no system turn, one newline after each header.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n{{ message['content'] }}<|eot_id|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n{% endif %}"
)

#: The same, with the task's first line (``Task Instruction: <intent>``, from the first user turn) again at the
#: end of the last user turn, after the page, where cutting the page to the budget never drops it: the intent
#: is ~800 tokens above the answer in :data:`CHAT_TEMPLATE`, ~20 with the reminder. Measured in
#: webrl/assets/PROVENANCE.md (a little better on held-out steps; not enough to make a short SFT read the intent).
CHAT_TEMPLATE_WITH_TASK_REMINDER = (
    "{{ bos_token }}"
    "{%- set ns = namespace(task='') -%}"
    "{%- for message in messages if message['role'] == 'user' -%}"
    "{%- if loop.first and message['content'].startswith('Task Instruction: ') -%}"
    "{%- set ns.task = message['content'].split('\n')[0] -%}"
    "{%- endif -%}{%- endfor -%}"
    "{% for message in messages %}{% if message['role'] != 'system' %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n{{ message['content'] }}"
    "{% if loop.last and message['role'] == 'user' and ns.task %}{{ '\\n' + ns.task }}{% endif %}<|eot_id|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n{% endif %}"
)


@dataclass(frozen=True)
class TinySize:
    """Shape of a tiny ``LlamaForCausalLM``."""

    hidden_size: int  # d_model
    layers: int
    heads: int
    kv_heads: int  # grouped-query attention as in Llama-3
    intermediate_size: int  # SwiGLU width, ~2.7 x d as in Llama
    max_positions: int = 2048  # the actor prompt budget (settings.actor.max_prompt_tokens) + generation


#: Presets. Throughputs on the 2-core dev CPU: ~7k tok/s fwd+bwd at 2.5M params, ~2k at 5M.
SIZES: dict[str, TinySize] = {
    "test": TinySize(hidden_size=32, layers=1, heads=2, kv_heads=2, intermediate_size=64, max_positions=1024),
    "small": TinySize(hidden_size=128, layers=2, heads=4, kv_heads=2, intermediate_size=352),
    "base": TinySize(hidden_size=192, layers=3, heads=6, kv_heads=2, intermediate_size=512),
    "large": TinySize(hidden_size=256, layers=4, heads=8, kv_heads=4, intermediate_size=704),
}


def grammar_corpus(seed: int = 0) -> list[str]:
    """Lines that teach the tokenizer the action grammar and the element ids."""
    rng = random.Random(seed)
    lines = []
    for kind in ActionType:
        for _ in range(8):
            element = str(rng.randint(0, MAX_SINGLE_TOKEN_ID))
            if kind is ActionType.EXIT:
                lines.append(Action(type=kind, message="the answer").format())
            elif kind in (ActionType.TYPE, ActionType.SEARCH, ActionType.SELECT):
                lines.append(Action(type=kind, argument="text", element=element).format())
            elif kind in (ActionType.CLICK, ActionType.HOVER):
                lines.append(Action(type=kind, element=element).format())
            else:
                lines.append(Action(type=kind).format())
    ids = " ".join(f'id="{n}"' for n in range(MAX_SINGLE_TOKEN_ID + 1))
    lines.extend([ids] * ID_REPEATS)
    skeleton = "Task Instruction: Round user assistant system ** Simplified html ** # Element: # Note: YES NO"
    lines.extend([skeleton] * ID_REPEATS)  # the prompts' own words and the ORM's answers: whole tokens too
    return lines


def pretokenize_pattern(words: str) -> str:
    """The :data:`PRETOKENIZE_PATTERNS` entry for ``words``; a ValueError naming the choices otherwise."""
    if words not in PRETOKENIZE_PATTERNS:
        raise ValueError(f"unknown word tokenisation {words!r}; expected one of {list(PRETOKENIZE_PATTERNS)}")
    return PRETOKENIZE_PATTERNS[words]


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 4096, words: str = "apart") -> Tokenizer:
    """A byte-level BPE :class:`tokenizers.Tokenizer` trained on ``corpus`` plus the grammar corpus; ``words``
    picks the pre-tokenisation (:func:`pretokenize_pattern`)."""
    pattern = pretokenize_pattern(words)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([*grammar_corpus(), *corpus], trainer=trainer)
    return tokenizer


def build_tokenizer(corpus: Iterable[str], out_dir: str | Path, vocab_size: int = 4096, words: str = "apart",
                    task_reminder: bool = False) -> PreTrainedTokenizerFast:
    """Train the tokenizer on ``corpus`` and save it as a Hugging Face tokenizer folder at ``out_dir``, with
    :data:`CHAT_TEMPLATE` or, with ``task_reminder``, :data:`CHAT_TEMPLATE_WITH_TASK_REMINDER`."""
    fast = PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(corpus, vocab_size, words), bos_token=BOS,
                                   eos_token=EOT, pad_token=PAD, padding_side="left",
                                   model_max_length=SIZES["base"].max_positions)
    fast.chat_template = CHAT_TEMPLATE_WITH_TASK_REMINDER if task_reminder else CHAT_TEMPLATE
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    return fast


def build_tiny_llama(tokenizer: PreTrainedTokenizerFast, size: TinySize | str = "small",
                     seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised ``LlamaForCausalLM`` sized by ``size``, deterministic for ``seed``."""
    shape = SIZES[size] if isinstance(size, str) else size
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_positions,
        rope_theta=10000.0,  # short contexts: Llama-2's base is plenty
        tie_word_embeddings=True,  # the embedding is most of a tiny model's parameters; share it
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.02,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    stop_ids = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(EOS)]  # end of turn, end of text
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=False)
    return model


def save_tiny(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, out_dir: str | Path) -> Path:
    """Write the model and tokenizer as one Hugging Face folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_folder(corpus: Iterable[str], out_dir: str | Path, *, size: TinySize | str = "small",
                      vocab_size: int = 4096, seed: int = 0, words: str = "apart",
                      task_reminder: bool = False) -> Path:
    """Tokenizer + randomly initialised tiny Llama, written as one Hugging Face folder (the SFT base)."""
    out = Path(out_dir)
    tokenizer = build_tokenizer(corpus, out, vocab_size=vocab_size, words=words, task_reminder=task_reminder)
    return save_tiny(build_tiny_llama(tokenizer, size, seed=seed), tokenizer, out)
