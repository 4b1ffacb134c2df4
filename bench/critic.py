"""Critic training: steps/s of WebRL's critic objective with each shared state forwarded once (windows of
consecutive steps, ``window_sampler``) against the earlier batching (length buckets, s and s' of every
step forwarded on their own), and of the heads alone on a frozen backbone (``critic.train_backbone`` False:
each distinct state encoded once, no backward pass through the backbone; ``--head-epochs`` passes), on the same
synthetic trajectories, in the same run.

    .venv/bin/python bench/critic.py [--size small] [--backbone FOLDER] [--lora] [--trajectories 12] [--steps 6]
                                     [--tokens 400] [--batch-size 4] [--head-epochs 1,20]

The backbone is a tiny Llama built here (no download), or ``--backbone`` (a model folder, e.g. the converted
SmolLM2 base under ``<artifacts>/models/base/smollm2-135m``). A training batch of 4 holds two windows of two
consecutive steps, which share one state each (6 forwards, not 8); on the tiny model fixed per-batch costs hide
the saving, on a real backbone the forwards dominate. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from services.trainer.critic_heads import distinct_states, train_heads
from services.trainer.data import StatePairItem, state_pair_collate, window_sampler
from services.trainer.losses import critic_loss
from services.trainer.phase import critic_loss_fn
from services.trainer.training_loop import (
    LoopConfig,
    make_accelerator,
    prepare,
    prepared_batches,
    prepared_loader,
    train,
)
from webrl.models.adapters import LoraSpec
from webrl.models.critic import CriticModel
from webrl.models.examples import collate_prompts
from webrl.models.tiny import build_tiny_llama, build_tokenizer, save_tiny

WORDS = ["Electronics", "Books", "laptop", "price", "order", "customer", "review", "issue", "merge", "request"]


def synthetic_items(vocab: int, trajectories: int, steps: int, tokens: int, seed: int) -> list[StatePairItem]:
    """``trajectories`` of ``steps`` steps each; state t is a page of about ``tokens`` random ids (s' of step t is
    the state of step t + 1), shuffled as the trainer's experience is."""
    rng = random.Random(seed)
    items: list[StatePairItem] = []
    for trajectory in range(trajectories):
        states = [[rng.randrange(4, vocab) for _ in range(rng.randint(tokens // 2, tokens))] for _ in range(steps + 1)]
        g = float(rng.random() < 0.3)
        items.extend(StatePairItem(len(items), states[t], states[t + 1], g, trajectory, t) for t in range(steps))
    rng.shuffle(items)
    return [StatePairItem(k, it.state, it.next_state, it.mc_return, it.trajectory_id, it.step)
            for k, it in enumerate(items)]


def separate_collate(items: list[StatePairItem]) -> dict[str, torch.Tensor]:
    """The earlier batching: s and s' of every step padded and forwarded on their own."""
    s, n = collate_prompts([it.state for it in items], 0), collate_prompts([it.next_state for it in items], 0)
    return {"state_input_ids": s["input_ids"], "state_attention_mask": s["attention_mask"],
            "next_input_ids": n["input_ids"], "next_attention_mask": n["attention_mask"],
            "mc_return": torch.tensor([it.mc_return for it in items]),
            "index": torch.tensor([it.index for it in items])}


def separate_loss_fn(model, batch):
    return critic_loss(model(batch["state_input_ids"], batch["state_attention_mask"]),
                       model(batch["next_input_ids"], batch["next_attention_mask"]), batch["mc_return"])


def fresh_critic(folder: Path, seed: int, lora: bool) -> CriticModel:
    return CriticModel.from_backbone(folder, seed=seed, dtype=torch.float32, lora=LoraSpec() if lora else None)


def measure(folder: Path, items: list[StatePairItem], batch_size: int, windows: bool, seed: int, lora: bool) -> dict:
    config = LoopConfig(lr=1e-4, batch_size=batch_size, seed=seed)
    accelerator = make_accelerator(config)
    prepared = prepare(accelerator, fresh_critic(folder, seed, lora), config)
    if windows:
        loader = prepared_batches(accelerator, items, window_sampler(items, batch_size, seed=seed),
                                  state_pair_collate(0))
        fn = critic_loss_fn
    else:
        lengths = [max(len(it.state), len(it.next_state)) for it in items]
        loader = prepared_loader(accelerator, items, lengths, separate_collate, batch_size, shuffle=True, seed=seed)
        fn = separate_loss_fn
    start = time.perf_counter()
    summary = train(accelerator, prepared, loader, fn, config)
    seconds = time.perf_counter() - start
    return {"steps": summary.steps, "seconds": round(seconds, 2), "tokens_forwarded": summary.tokens,
            "steps_per_s": round(len(items) / seconds, 2)}


def measure_heads(folder: Path, items: list[StatePairItem], batch_size: int, epochs: int, seed: int,
                  lora: bool) -> dict:
    """The heads alone on the frozen backbone: encode each distinct state once, then ``epochs`` passes."""
    config = LoopConfig(lr=1e-3, epochs=epochs, batch_size=batch_size, seed=seed)
    critic = fresh_critic(folder, seed, lora)
    start = time.perf_counter()
    trained = train_heads(make_accelerator(config), critic, items, 0, config)
    seconds = time.perf_counter() - start
    return {"steps": trained.summary.steps, "seconds": round(seconds, 2),
            "encode_seconds": round(trained.encode_seconds, 2),
            "tokens_forwarded": sum(map(len, distinct_states(items).states)),
            "steps_per_s": round(len(items) / seconds, 2)}


def main(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        if args.backbone:
            from transformers import AutoTokenizer

            folder = args.backbone
            vocab = len(AutoTokenizer.from_pretrained(str(folder), local_files_only=True))
        else:
            folder = Path(tmp)
            tokenizer = build_tokenizer([" ".join(WORDS)] * 4, folder, vocab_size=800)
            save_tiny(build_tiny_llama(tokenizer, args.size, seed=args.seed), tokenizer, folder)
            vocab = len(tokenizer)
        items = synthetic_items(vocab, args.trajectories, args.steps, args.tokens, args.seed)
        separate = measure(folder, items, args.batch_size, windows=False, seed=args.seed, lora=args.lora)
        windows = measure(folder, items, args.batch_size, windows=True, seed=args.seed, lora=args.lora)
        heads = {epochs: measure_heads(folder, items, args.batch_size, epochs, args.seed, args.lora)
                 for epochs in (int(e) for e in args.head_epochs.split(","))}
    ratio = round(windows["steps_per_s"] / separate["steps_per_s"], 2)
    trained = "LoRA adapter + heads" if args.lora else "whole backbone + heads"
    table = Table(title=f"critic training, {len(items)} steps ({args.trajectories} trajectories x {args.steps}), "
                        f"batch {args.batch_size}, torch threads {torch.get_num_threads()}")
    for column in ("what trains", "batching", "optimizer steps", "seconds", "tokens forwarded", "steps/s",
                   "vs windows"):
        table.add_column(column)
    rows = [(trained, "s and s' apart, length buckets", separate),
            (trained, "trajectory windows, shared states once", windows)]
    rows += [("heads, frozen backbone", f"states encoded once, {epochs} pass(es)", row)
             for epochs, row in heads.items()]
    for what, name, row in rows:
        table.add_row(what, name, str(row["steps"]), str(row["seconds"]), f"{row['tokens_forwarded']:,}",
                      str(row["steps_per_s"]), f"{row['steps_per_s'] / windows['steps_per_s']:.2f}x")
    Console().print(table)
    print(json.dumps({"model": str(args.backbone or args.size), "lora": args.lora, "separate": separate,
                      "windows": windows, "heads": heads, "ratio_windows_vs_separate": ratio,
                      "ratio_heads_vs_windows": {e: round(h["steps_per_s"] / windows["steps_per_s"], 2)
                                                 for e, h in heads.items()}}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="small", help="webrl.models.tiny size preset")
    parser.add_argument("--backbone", type=Path, help="a model folder to use instead of the tiny Llama")
    parser.add_argument("--trajectories", type=int, default=12)
    parser.add_argument("--steps", type=int, default=6, help="steps per trajectory")
    parser.add_argument("--tokens", type=int, default=400, help="most tokens per state")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter on the backbone (as a critic on an "
                        "adapter actor does), not the whole backbone")
    parser.add_argument("--head-epochs", default="1,20", help="passes of the frozen-backbone heads, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    main(parser.parse_args())
