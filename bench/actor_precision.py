"""The actor update's precision: seconds per optimizer step of the shipped SFT actor (SmolLM2-135M + LoRA, its
base in :func:`services.trainer.sft.lora_base_dtype`) trained in fp32 (``batching.mixed_precision=no``) against bf16
autocast where the hardware computes it natively (``native``), on a stored phase's own steps.

    .venv/bin/python bench/actor_precision.py [--fixture bench/fixtures/phase1-smollm2] [--steps 16] [--rounds 2]

The two arms alternate (``--rounds`` of each) on the same batches through the trainer's own loop
(:func:`services.trainer.training_loop.train`, gradient checkpointing, batch 4, the phase's prompts and completions
as generated); each arm starts from the shipped adapter. The loss is the completion's cross-entropy, so the ratio is
the optimizer steps' alone: a phase's update adds the reference pass and the flips probe, and there it gained less
(1.52-1.55x here against 1.13x for the whole update of ``bench/phase_offline.py run --tasks 0`` on an Intel Xeon with
AMX, docs/measurements.md, 2026-12-04). Prints one JSON object whose ``ratio_native_vs_fp32`` is fp32 seconds /
native seconds; where the hardware has no native bf16, ``native`` is fp32 and the ratio is ~1.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from services.trainer.data import SequenceItem, sequence_collate
from services.trainer.offline import load_phase
from services.trainer.sft import load_for_training, sft_loss_fn
from services.trainer.training_loop import (
    LoopConfig,
    make_accelerator,
    prepare,
    prepared_loader,
    resolve_precision,
    train,
)
from webrl.config import get_settings
from webrl.models.examples import EncodedExample, encode_example_ids, pad_id_of
from webrl.models.loading import load_tokenizer, native_bf16

SFT_ACTOR = Path("webrl/assets/actor-sft-smollm2")
FIXTURE = Path("bench/fixtures/phase1-smollm2")


def phase_examples(tokenizer, fixture: Path, n: int) -> list[EncodedExample]:
    """The first ``n`` steps of the stored phase that carry their generated ids, encoded as the actor trains them."""
    steps = [s for s in load_phase(fixture).steps if s.completion_ids][:n]
    if not steps:
        raise SystemExit(f"{fixture}: no stored step carries its completion ids")
    return [encode_example_ids(tokenizer, s.prompt, s.completion_ids) for s in steps]


def seconds_per_step(precision: str, examples: list[EncodedExample], batch_size: int, seed: int) -> dict:
    """One epoch over ``examples`` from the shipped adapter under ``precision``; seconds per optimizer step."""
    model, tokenizer = load_for_training(SFT_ACTOR, get_settings())
    config = LoopConfig(lr=1e-4, batch_size=batch_size, seed=seed, mixed_precision=precision)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, model, config)
    items = [SequenceItem(i, e, {}) for i, e in enumerate(examples)]
    loader = prepared_loader(accelerator, items, [len(e) for e in examples], sequence_collate(pad_id_of(tokenizer)),
                             batch_size, shuffle=True, seed=seed)
    start = time.perf_counter()
    summary = train(accelerator, prepared, loader, sft_loss_fn, config)
    seconds = time.perf_counter() - start
    return {"precision": precision, "computes_in": resolve_precision(precision), "steps": summary.steps,
            "tokens": summary.tokens, "seconds": round(seconds, 2), "s_per_step": round(seconds / summary.steps, 2),
            "first_loss": summary.first_loss, "last_loss": summary.last_loss}


def main(args: argparse.Namespace) -> None:
    examples = phase_examples(load_tokenizer(SFT_ACTOR, get_settings()), args.fixture, args.steps)
    runs: dict[str, list[dict]] = {"no": [], "native": []}
    for _ in range(args.rounds):
        for precision in runs:
            runs[precision].append(seconds_per_step(precision, examples, args.batch_size, args.seed))
    best = {p: min(r["s_per_step"] for r in rs) for p, rs in runs.items()}
    lengths = [len(e) for e in examples]
    report = {
        "fixture": str(args.fixture), "sequences": len(examples),
        "tokens_min_mean_max": [min(lengths), round(sum(lengths) / len(lengths)), max(lengths)],
        "batch_size": args.batch_size, "torch_threads": torch.get_num_threads(), "native_bf16": native_bf16(),
        "runs": runs, "s_per_step_fp32": best["no"], "s_per_step_native": best["native"],
        "ratio_native_vs_fp32": round(best["no"] / best["native"], 2),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fixture", type=Path, default=FIXTURE, help="a stored phase (bench/phase_offline.py export)")
    parser.add_argument("--steps", type=int, default=16, help="how many of its steps to train on")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each arm; the faster counts")
    parser.add_argument("--seed", type=int, default=0)
    main(parser.parse_args())
