"""ORM throughput: trajectories/s scored in batches (one forward pass per ``--batch-sizes`` trajectories) against
one trajectory per forward pass, as ratios measured in the same run. Also checks that batching does not
change any p by more than 1e-4.

    .venv/bin/python bench/orm.py [--model artifacts/models/orm] [--trajectories 64] [--batch-sizes 4 8 16]

Without ``--model`` a randomly initialised tiny Llama (``--size``) is built in a temporary folder (no download).
Each trajectory is a sandbox-sized episode: 2-6 steps, the last page a product list of ~40 elements.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from services.orm.scoring import LocalOrm
from webrl.agent.schemas import Observation, Step, Trajectory
from webrl.config import Settings
from webrl.models.tiny import build_tiny_folder

WORDS = ["Electronics", "Books", "Garden", "Dumbbell Set", "Headphones", "Camera", "Kitchen", "Toys"]
INTENTS = ["Show me the products in the {x} category", "Add {x} to my wish list", "What is the price of {x}?"]


def page(seed: int) -> str:
    """A sandbox-like simplified page: a nav bar and a product list, ~40 interactive elements."""
    links = " ".join(f'<a id="{i}"> {WORDS[(i + seed) % len(WORDS)]} </a>' for i in range(12))
    rows = " ".join(f'<li> <a id="{12 + i}"> {WORDS[(i * 3 + seed) % len(WORDS)]} {i} </a> <span> ${i}.99 </span>'
                    f' <button id="{40 + i}"> Add to Cart </button> </li>' for i in range(14))
    return f"<html> <nav> {links} </nav> <ul> {rows} </ul> </html>"


def trajectory(i: int) -> Trajectory:
    n_steps = 2 + i % 5
    steps = [Step(index=k, observation=Observation(html=page(i + k), url="http://127.0.0.1:7770/"),
                  response=f'# Element: the {WORDS[(i + k) % len(WORDS)]} link\ndo(action="Click", element="{k + 3}")')
             for k in range(n_steps - 1)]
    steps.append(Step(index=n_steps - 1, observation=Observation(html=page(i + n_steps), url="http://127.0.0.1:7770/"),
                      response=f'exit(message="{WORDS[i % len(WORDS)]}")'))
    return Trajectory(task_id=f"bench/{i}", intent=INTENTS[i % 3].format(x=WORDS[i % len(WORDS)]), steps=steps)


def rate(orm: LocalOrm, trajectories: list[Trajectory], batch_size: int) -> tuple[float, list[float]]:
    start = time.perf_counter()
    p = orm.probabilities(trajectories, batch_size=batch_size)
    return len(trajectories) / (time.perf_counter() - start), p


def bench(orm: LocalOrm, trajectories: list[Trajectory], batch_sizes: list[int]) -> dict:
    orm.probabilities(trajectories[:2], batch_size=2)  # warm-up
    single, p_single = rate(orm, trajectories, 1)
    report: dict = {"trajectories": len(trajectories), "one_at_a_time_per_s": round(single, 2)}
    for size in batch_sizes:
        batched, p_batched = rate(orm, trajectories, size)
        drift = max(abs(a - b) for a, b in zip(p_single, p_batched, strict=True))
        if drift > 1e-4:
            raise AssertionError(f"batch size {size} changed p by {drift:.2e}")
        report[f"batch{size}"] = {"per_s": round(batched, 2), "ratio": round(batched / single, 2),
                                  "max_p_drift": float(f"{drift:.1e}")}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="ORM folder (default: a fresh random tiny Llama).")
    parser.add_argument("--size", default="small", help="Tiny preset when no --model is given.")
    parser.add_argument("--trajectories", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trajectories = [trajectory(i) for i in range(args.trajectories)]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model
        if folder is None:
            corpus = [page(i) for i in range(50)] + [t.intent for t in trajectories] + ["YES NO"] * 20
            folder = build_tiny_folder(corpus, Path(tmp) / "model", size=args.size)
        settings = Settings(home=Path(tmp) / "home", models={"device": args.device})
        orm = LocalOrm(folder, settings)
        tokens = [len(orm.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in orm.prompts(trajectories)]
        report = {"model": str(args.model or f"random tiny {args.size}"), "parameters": orm.model.num_parameters(),
                  "device": args.device, "threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                  "prompt_tokens_mean": round(sum(tokens) / len(tokens), 1), "prompt_tokens_max": max(tokens),
                  **bench(orm, trajectories, args.batch_sizes)}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
