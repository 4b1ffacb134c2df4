"""Prompt + completion -> token ids with a target mask, and the collate that pads a batch.

The prompt and the completion are tokenised separately and concatenated, so the completion tokens are
exactly the tokens the actor generated after that prompt (a rendered chat prompt already holds its BOS and
turn headers, hence ``add_special_tokens=False``). The completion ends with the end-of-turn token, which is
part of the target: the actor must learn to stop (docs/design.md step 6: "end-of-turn token included").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: End-of-turn tokens of the chat formats we meet, most specific first (Llama-3 ``<|eot_id|>``, ChatML
#: ``<|im_end|>``); a tokenizer with none of them ends turns with its EOS token.
END_OF_TURN_TOKENS = ("<|eot_id|>", "<|im_end|>", "<|end|>")

@dataclass(frozen=True)
class EncodedExample:
    """One training sequence: ``input_ids`` (T,) and ``target_mask`` (T,), 1 on completion tokens."""

    input_ids: list[int]
    target_mask: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def n_target(self) -> int:
        return sum(self.target_mask)


def end_of_turn_id(tokenizer: Any) -> int:
    """The id that closes an assistant turn: a chat end-of-turn token if the vocabulary has one, else EOS."""
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab:
            return int(vocab[token])
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has neither an end-of-turn token nor an EOS token")
    return int(tokenizer.eos_token_id)


def _join(prompt_ids: list[int], completion_ids: list[int], max_length: int | None) -> EncodedExample:
    """Concatenate; when too long, drop prompt tokens from the left (the completion is never cut)."""
    if max_length is not None and len(prompt_ids) + len(completion_ids) > max_length:
        keep = max(0, max_length - len(completion_ids))
        prompt_ids = prompt_ids[len(prompt_ids) - keep:] if keep else []
        completion_ids = completion_ids[-max_length:]
    return EncodedExample(input_ids=prompt_ids + completion_ids,
                          target_mask=[0] * len(prompt_ids) + [1] * len(completion_ids))


def encode_example_ids(tokenizer: Any, prompt: str, completion_ids: Sequence[int], *,
                       max_length: int | None = None) -> EncodedExample:
    """Like :func:`encode_example` for a completion given as token ids (as generated, never re-tokenised).

    The end-of-turn token is appended unless the ids already end with it.
    """
    eot = end_of_turn_id(tokenizer)
    completion = [int(t) for t in completion_ids]
    if not completion or completion[-1] != eot:
        completion.append(eot)
    prompt_ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    return _join(prompt_ids, completion, max_length)


def encode_example(tokenizer: Any, prompt: str, completion: str, *, max_length: int | None = None) -> EncodedExample:
    """``prompt`` + ``completion`` + end-of-turn as ids; ``target_mask`` is 1 on completion and end-of-turn."""
    completion_ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"])
    return encode_example_ids(tokenizer, prompt, completion_ids, max_length=max_length)


def encode_prompt(tokenizer: Any, prompt: str, *, max_length: int | None = None) -> list[int]:
    """A prompt alone (the critic's input), cut from the left to ``max_length`` tokens."""
    ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    return ids[-max_length:] if max_length else ids


def pad_id_of(tokenizer: Any) -> int:
    """The padding id: the tokenizer's pad token, else its EOS (padding is masked out either way)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("tokenizer has neither a pad nor an EOS token")
    return int(pad)


def collate(examples: Sequence[EncodedExample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the batch's longest sequence.

    Returns ``input_ids`` (B, T) long, ``attention_mask`` (B, T) long, ``target_mask`` (B, T) long, where
    T = max length in the batch (not a global maximum: length-bucketed batches waste little padding).
    """
    if not examples:
        raise ValueError("cannot collate an empty batch")
    width = max(len(e) for e in examples)
    input_ids = torch.full((len(examples), width), pad_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)  # (B, T)
    target_mask = torch.zeros((len(examples), width), dtype=torch.long)  # (B, T)
    for row, example in enumerate(examples):
        n = len(example)
        input_ids[row, :n] = torch.tensor(example.input_ids, dtype=torch.long)
        attention_mask[row, :n] = 1
        target_mask[row, :n] = torch.tensor(example.target_mask, dtype=torch.long)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "target_mask": target_mask}


def collate_prompts(prompts: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad prompt-only sequences: ``input_ids`` (B, T), ``attention_mask`` (B, T)."""
    batch = collate([EncodedExample(list(p), [0] * len(p)) for p in prompts], pad_id)
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
