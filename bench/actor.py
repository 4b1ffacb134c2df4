"""Actor steps per second of the local backend at concurrency 1, 8 and 16, with the shared-prefix cache off and
on, as ratios against sequential ``generate_batch([t])`` calls (prefix cache off, one prompt per forward pass)
measured in the same run, before and after the concurrent runs.

    .venv/bin/python bench/actor.py                                    # a random tiny Llama: seconds
    .venv/bin/python bench/actor.py --base smollm2-135m --requests 4 --repeats 1   # the pretrained actor: minutes
    .venv/bin/python bench/actor.py --model PATH --concurrency 16 --out report.json

Without ``--model`` or ``--base`` a randomly initialised tiny Llama (``--size``) is built in a temporary folder.
Each request is one actor step: the actor prompt of a sandbox-sized page through the model's chat template (for
SmolLM2 ~970 tokens, of which the system turn and ``Task Instruction:`` are shared), ``--new-tokens`` greedy
tokens. Concurrency ``c`` runs ``max(c, --requests)`` requests, ``--repeats`` times; the sequential baseline runs
``--requests``. "Greedy = seq." counts the requests whose token ids equal the sequential baseline's.
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
from rich.console import Console
from rich.table import Table

from webrl.config import Settings, get_settings
from webrl.models.backends import Generation
from webrl.models.backends.kv_cache import common_prefix_length
from webrl.models.backends.local import LocalBackend
from webrl.models.tiny import build_tiny_folder
from webrl.prompts.actor import render_actor_prompt

CONCURRENCY = (1, 8, 16)
THREADS = 1  # the dev CPU is shared: with 2 OpenMP threads a loaded machine stalls (tiny decode steps ~70x slower)
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


def timed(run) -> tuple[float, list[Generation]]:  # (seconds, generations)
    start = time.perf_counter()
    generations = run()
    return time.perf_counter() - start, generations


def sequential(backend: LocalBackend, texts: list[str], new_tokens: int) -> tuple[float, list[Generation]]:
    """Steps/s of one ``generate_batch([t])`` per text with the prefix cache off: the baseline."""
    backend.prefix_cache = False
    seconds, generations = timed(lambda: [backend.generate_batch([t], new_tokens, 0.0)[0] for t in texts])
    return len(texts) / seconds, generations


def concurrent(backend: LocalBackend, texts: list[str], new_tokens: int, concurrency: int, prefix: bool
               ) -> tuple[float, int, list[Generation]]:
    """``concurrency`` callers submitting one step each through the batching queue: (seconds, batches, results)."""
    backend.prefix_cache = prefix
    batches = backend.batches_run
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        seconds, generations = timed(lambda: list(pool.map(lambda t: backend.generate([t], new_tokens, 0.0)[0],
                                                           texts)))
    return seconds, backend.batches_run - batches, generations


def bench(backend: LocalBackend, texts: list[str], new_tokens: int, levels: tuple[int, ...], requests: int,
          repeats: int) -> dict:
    """The baseline before and after; between them each level with the prefix cache off and on, ``repeats``
    times, the order flipped each time (whichever runs first at a new batch shape pays for it).

    Unmeasured first: two steps with the prefix cache on (the kernels' first call is slow, and the second step
    stores the shared prefix, as any second step of a served model does).
    """
    backend.prefix_cache = True
    for t in texts[:2]:
        backend.generate_batch([t], new_tokens, 0.0)
    before, reference = sequential(backend, texts[:requests], new_tokens)
    totals: dict[tuple[int, bool], list[float]] = {}  # (concurrency, prefix) -> [seconds, requests, batches]
    same: dict[tuple[int, bool], int] = {}  # requests whose token ids equal the baseline's, first repeat
    for repeat in range(repeats):
        for c in levels:
            for prefix in ((False, True) if repeat % 2 == 0 else (True, False)):
                batch = texts[:max(c, requests)]
                seconds, batches, generations = concurrent(backend, batch, new_tokens, c, prefix)
                total = totals.setdefault((c, prefix), [0.0, 0, 0])
                total[0], total[1], total[2] = total[0] + seconds, total[1] + len(batch), total[2] + batches
                same.setdefault((c, prefix), sum(g.token_ids == r.token_ids
                                                 for g, r in zip(generations, reference, strict=False)))
    after, _ = sequential(backend, texts[:requests], new_tokens)
    base = (before + after) / 2
    cells = [{"concurrency": c, "prefix_cache": prefix, "requests": int(n), "steps_per_s": n / seconds,
              "ratio": n / seconds / base, "mean_batch": n / max(1, batches),
              "greedy_same": f"{same[(c, prefix)]}/{len(reference)}"}
             for (c, prefix), (seconds, n, batches) in sorted(totals.items())]
    return {"sequential_steps_per_s": base, "sequential_before_after": [before, after], "repeats": repeats,
            "cells": cells}


def describe(backend: LocalBackend, texts: list[str], label: str, new_tokens: int) -> dict:
    rows = [backend.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    return {"model": label, "parameters": backend.model.num_parameters(), "dtype": str(backend.model.dtype),
            "threads": torch.get_num_threads(), "load_average": os.getloadavg()[0], "new_tokens": new_tokens,
            "prompt_tokens": sum(map(len, rows)) / len(rows), "shared_prefix_tokens": common_prefix_length(rows)}


def show(report: dict) -> None:
    title = (f"{report['model']} ({report['dtype']}, {report['threads']} threads): {report['prompt_tokens']:.0f} "
             f"prompt tokens ({report['shared_prefix_tokens']} shared), {report['new_tokens']} new; sequential "
             f"{report['sequential_steps_per_s']:.3f} steps/s")
    table = Table(title=title)
    for column in ("concurrency", "prefix cache", "requests", "steps/s", "x seq.", "mean batch", "greedy = seq."):
        table.add_column(column, justify="right")
    for c in report["cells"]:
        table.add_row(str(c["concurrency"]), "on" if c["prefix_cache"] else "off", str(c["requests"]),
                      f"{c['steps_per_s']:.3f}", f"{c['ratio']:.2f}x", f"{c['mean_batch']:.1f}", c["greedy_same"])
    Console(width=max(120, Console().width)).print(table)


def model_folder(args: argparse.Namespace, settings: Settings, tmp: Path) -> tuple[Path, str]:
    if args.model is not None:
        return args.model, str(args.model)
    if args.base is not None:
        from webrl.models.pretrained_base import ensure_base

        return ensure_base(settings, args.base), args.base
    corpus = [page(i) for i in range(50)] + [i.format(x=w) for i in INTENTS for w in WORDS]
    return build_tiny_folder(corpus, tmp / "model", size=args.size), f"random tiny {args.size}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", type=Path, help="Model folder (default: a fresh random tiny Llama).")
    source.add_argument("--base", help="A pretrained base by name (smollm2-135m), converted on first use.")
    parser.add_argument("--size", default="small", help="Tiny preset when neither --model nor --base is given.")
    parser.add_argument("--requests", type=int, default=16, help="Sequential requests (and the least per level).")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2, help="Runs of each level, off/on order flipped each time.")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=THREADS, help="Intra-op CPU threads.")
    parser.add_argument("--out", type=Path, help="Also write the report as JSON here.")
    args = parser.parse_args()
    settings = get_settings().replace(actor={"max_batch": max(args.concurrency)},
                                      models={"dtype": args.dtype, "torch_threads": args.threads})
    with tempfile.TemporaryDirectory() as tmp:
        folder, label = model_folder(args, settings, Path(tmp))
        backend = LocalBackend.from_path(folder, settings)
        texts = prompts(backend.tokenizer, max(args.requests, *args.concurrency))
        report = describe(backend, texts, label, args.new_tokens)
        report.update(bench(backend, texts, args.new_tokens, tuple(args.concurrency), args.requests,
                            args.repeats))
        backend.close()
    show(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
