"""Actions per second of the local backend at concurrency 1, 4 and 16, as ratios against sequential
``generate`` calls (one prompt per forward pass) measured in the same run.

    .venv/bin/python bench/actor.py [--model artifacts/models/actor-sft] [--requests 48] [--out report.json]

Without ``--model`` a randomly initialised tiny Llama (``--size``) is built in a temporary folder. Each
request is one actor step: the actor prompt of a sandbox-sized page, ``--new-tokens`` greedy tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from webrl.config import Settings
from webrl.models.backends.local import LocalBackend
from webrl.models.tiny import build_tiny_folder
from webrl.prompts.actor import render_actor_prompt

CONCURRENCY = (1, 4, 16)
INTENTS = ["Show me the products in the {x} category", "Add {x} to my wish list", "What is the price of {x}?"]
WORDS = ["Electronics", "Books", "Garden", "Dumbbell Set", "Headphones", "Camera", "Kitchen", "Toys"]


def page(seed: int) -> str:
    """A sandbox-like simplified page: a nav bar and a product list, ~40 interactive elements."""
    links = " ".join(f'<a id="{i}"> {WORDS[(i + seed) % len(WORDS)]} </a>' for i in range(12))
    rows = " ".join(f'<li> <a id="{12 + i}"> {WORDS[(i * 3 + seed) % len(WORDS)]} {i} </a> <span> ${i}.99 </span>'
                    f' <button id="{40 + i}"> Add to Cart </button> </li>' for i in range(14))
    return f"<html> <nav> {links} </nav> <ul> {rows} </ul> </html>"


def prompts(tokenizer, n: int) -> list[str]:
    return [render_actor_prompt(tokenizer, INTENTS[i % 3].format(x=WORDS[i % len(WORDS)]), [], page(i),
                                max_tokens=1024) for i in range(n)]


def actions_per_second(run, n: int) -> float:
    start = time.perf_counter()
    run()
    return n / (time.perf_counter() - start)


def bench(backend: LocalBackend, texts: list[str], new_tokens: int) -> dict:
    """Sequential rate (mean of a run before and one after the concurrent runs), then each concurrency.

    A full unmeasured pass first: the CPU kernels' first call at each new shape is slow, and every pass after
    it sees the same shapes.
    """
    n = len(texts)

    def sequential_pass() -> float:
        return actions_per_second(lambda: [backend.generate_batch([t], new_tokens, 0.0) for t in texts], n)

    sequential_pass()  # warm-up
    before = sequential_pass()
    rates = {}
    for concurrency in CONCURRENCY:
        batches = backend.batches_run
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            rate = actions_per_second(lambda pool=pool: list(pool.map(
                lambda t: backend.generate([t], new_tokens, 0.0), texts)), n)
        rates[concurrency] = (rate, n / max(1, backend.batches_run - batches))
    after = sequential_pass()
    sequential = (before + after) / 2
    report: dict = {"requests": n, "new_tokens": new_tokens, "sequential_actions_per_s": round(sequential, 3),
                    "sequential_before_after": [round(before, 3), round(after, 3)]}
    for concurrency, (rate, mean_batch) in rates.items():
        report[f"c{concurrency}"] = {"actions_per_s": round(rate, 3), "ratio": round(rate / sequential, 2),
                                     "mean_batch": round(mean_batch, 2)}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="Model folder (default: a fresh random tiny Llama).")
    parser.add_argument("--size", default="small", help="Tiny preset when no --model is given.")
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model
        if folder is None:
            corpus = [page(i) for i in range(50)] + [i.format(x=w) for i in INTENTS for w in WORDS]
            folder = build_tiny_folder(corpus, Path(tmp) / "model", size=args.size)
        settings = Settings(home=Path(tmp) / "home", actor_max_batch=16)
        backend = LocalBackend.from_path(folder, settings)
        texts = prompts(backend.tokenizer, args.requests)
        report = {"model": str(args.model or f"random tiny {args.size}"), "parameters": backend.model.num_parameters(),
                  "threads": torch.get_num_threads(), "load_average": os.getloadavg()[0],
                  **bench(backend, texts, args.new_tokens)}
        backend.close()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
