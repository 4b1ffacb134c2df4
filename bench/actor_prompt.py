"""Actor prompt building against the length of the history: seconds per prompt for 100/200/400/800 earlier
steps, with the rounds to drop found by the estimate-and-gallop search (``render_actor_prompt``) and, as the
baseline measured in the same run, by dropping one round per re-render (what it did before). Prints each
time's ratio to the one before: 2 per doubling is linear, 4 quadratic.

    .venv/bin/python bench/actor_prompt.py                       # the shipped tiny actor's tokenizer
    .venv/bin/python bench/actor_prompt.py --model PATH --budget 1024
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from webrl.config import Settings
from webrl.models.loading import load_tokenizer
from webrl.prompts.actor import render_actor_prompt

SIZES = (100, 200, 400, 800)
INTENT = "Show me the products in the Electronics category"
PAGE = " ".join(f'<a id="{i}"> Product {i} </a> <button id="{i + 500}"> Add to Cart </button>' for i in range(80))
SHIPPED = Path(__file__).resolve().parents[1] / "webrl" / "assets" / "actor-sft"


def history(n: int) -> list[str]:
    return [f'# Element: the link of product {i}\ndo(action="Click", element="{i % 80}")' for i in range(n)]


def one_at_a_time(tokenizer, past: list[str], budget: int) -> str:
    """The baseline: drop the oldest round and re-render until the prompt with no HTML fits, then cut the HTML."""
    def n_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    while past and n_tokens(render_actor_prompt(tokenizer, INTENT, past, "")) > budget:
        past = past[1:]
    return render_actor_prompt(tokenizer, INTENT, past, PAGE, max_tokens=budget)


def seconds(build, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        build()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=SHIPPED, help="A model folder whose tokenizer renders.")
    parser.add_argument("--budget", type=int, default=1024, help="Prompt tokens (WEBRL_ACTOR__MAX_PROMPT_TOKENS).")
    parser.add_argument("--repeats", type=int, default=3, help="Best of this many builds per size.")
    args = parser.parse_args()
    tokenizer = load_tokenizer(str(args.model), Settings())
    table = Table(title=f"actor prompt of {args.budget} tokens, {args.model.name}")
    for column in ("history", "search s", "ratio", "one-at-a-time s", "ratio", "speed-up"):
        table.add_column(column, justify="right")
    previous: tuple[float, float] | None = None
    for n in SIZES:
        fast = seconds(lambda n=n: render_actor_prompt(tokenizer, INTENT, history(n), PAGE, max_tokens=args.budget),
                       args.repeats)
        slow = seconds(lambda n=n: one_at_a_time(tokenizer, history(n), args.budget), 1)
        assert render_actor_prompt(tokenizer, INTENT, history(n), PAGE, max_tokens=args.budget) == \
            one_at_a_time(tokenizer, history(n), args.budget), f"the two disagree at {n}"
        ratios = ("", "") if previous is None else (f"{fast / previous[0]:.2f}", f"{slow / previous[1]:.2f}")
        table.add_row(str(n), f"{fast:.4f}", ratios[0], f"{slow:.3f}", ratios[1], f"{slow / fast:.0f}x")
        previous = (fast, slow)
    Console().print(table)


if __name__ == "__main__":
    main()
