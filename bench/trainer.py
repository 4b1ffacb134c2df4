"""Trainer throughput: samples/s of SFT training with length-bucketed padded batches against batch size 1
(WebRL's published setting), on a tiny Llama built here (no download).

    .venv/bin/python bench/trainer.py [--size small] [--samples 96] [--batch-size 8] [--out FILE]

Prints one JSON object: samples/s for batch size 1, for random (unbucketed) batches and for length-bucketed
batches of ``--batch-size``, the padding overhead of each, and the ratio bucketed / batch-size-1.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch

from services.trainer.data import SequenceItem, bucket_batches, sequence_collate
from services.trainer.sft import sft_loss_fn
from services.trainer.training_loop import LoopConfig, make_accelerator, prepare, prepared_loader, train
from webrl.models.examples import EncodedExample, encode_example, pad_id_of
from webrl.models.tiny import build_tiny_llama, build_tokenizer

WORDS = ["Electronics", "Books", "laptop", "price", "order", "customer", "review", "issue", "merge", "request"]


def synthetic_examples(tokenizer, n: int, seed: int) -> list[EncodedExample]:
    """Prompts of 20-400 words of fake simplified HTML (lengths spread like real pages) + one action each."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        page = " ".join(f'<a id="{rng.randint(0, 300)}">{rng.choice(WORDS)}</a>' for _ in range(rng.randint(5, 100)))
        action = f'do(action="Click", element="{rng.randint(0, 300)}")'
        out.append(encode_example(tokenizer, f"Show me {rng.choice(WORDS)}\n{page}", action))
    return out


def padded_tokens(lengths: list[int], batches: list[list[int]]) -> int:
    return sum(len(b) * max(lengths[i] for i in b) for b in batches)


def measure(tokenizer, size: str, examples: list[EncodedExample], batch_size: int, bucketed: bool,
            seed: int) -> dict:
    """Train one epoch over ``examples`` on a fresh model; samples/s and padding overhead."""
    model = build_tiny_llama(tokenizer, size, seed=seed)
    config = LoopConfig(lr=1e-4, batch_size=batch_size, seed=seed)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    items = [SequenceItem(i, e, {}) for i, e in enumerate(examples)]
    lengths = [len(e) for e in examples]
    # Unbucketed: give every example the same sort key, so batches keep the shuffled order.
    keys = lengths if bucketed else [0] * len(examples)
    shuffled = list(range(len(items)))
    random.Random(seed).shuffle(shuffled)
    items = [SequenceItem(k, items[i].encoded, {}) for k, i in enumerate(shuffled)]
    keys = [keys[i] for i in shuffled]
    loader = prepared_loader(accelerator, items, keys, sequence_collate(pad_id_of(tokenizer)), batch_size,
                             shuffle=True, seed=seed)
    start = time.perf_counter()
    summary = train(accelerator, prepared, loader, sft_loss_fn, config)
    seconds = time.perf_counter() - start
    lens = [len(it.encoded) for it in items]
    batches = bucket_batches(keys, batch_size, seed=seed)
    real = sum(lens)
    return {"batch_size": batch_size, "bucketed": bucketed, "samples": summary.samples, "seconds": round(seconds, 2),
            "samples_per_s": round(summary.samples / seconds, 2),
            "padding_overhead": round(padded_tokens(lens, batches) / real - 1, 3)}


def main(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [" ".join(WORDS)] * 4
        tokenizer = build_tokenizer(corpus, Path(tmp), vocab_size=800)
    examples = synthetic_examples(tokenizer, args.samples, args.seed)
    lengths = [len(e) for e in examples]
    one = measure(tokenizer, args.size, examples, 1, bucketed=False, seed=args.seed)
    unbucketed = measure(tokenizer, args.size, examples, args.batch_size, bucketed=False, seed=args.seed)
    bucketed = measure(tokenizer, args.size, examples, args.batch_size, bucketed=True, seed=args.seed)
    report = {
        "model": args.size, "parameters": build_tiny_llama(tokenizer, args.size).num_parameters(),
        "samples": len(examples), "tokens_min_mean_max": [min(lengths), round(sum(lengths) / len(lengths)),
                                                          max(lengths)],
        "torch_threads": torch.get_num_threads(), "device": "cpu" if not torch.cuda.is_available() else "cuda",
        "batch_size_1": one, "random_batches": unbucketed, "bucketed_batches": bucketed,
        "ratio_bucketed_vs_bs1": round(bucketed["samples_per_s"] / one["samples_per_s"], 2),
        "ratio_bucketed_vs_random": round(bucketed["samples_per_s"] / unbucketed["samples_per_s"], 2),
    }
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", default="small", help="webrl.models.tiny size preset")
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    main(parser.parse_args())
