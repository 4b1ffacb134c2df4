"""The noise floor of the actor's log-ratio: how far the same model's action log-probs move when only the batch
around a sequence changes (batch of one vs. a right-padded batch of four), in the trainer's bf16 base against fp32.

WebRL's KL term and the ``kl`` metric compare lp (the actor during the update) with lp_ref (the same actor before
it, other batches): a per-token difference below this floor is numerics, not learning.

    .venv/bin/python bench/logprob_noise.py [--model FOLDER] [--sequences 16] [--tokens 300,900] [--action 16]

``--model``: an adapter or full folder (default: the shipped SFT adapter, ``webrl/assets/actor-sft-smollm2``, on its
base under ``<artifacts>/models/base``, converted once by ``webrl models base smollm2-135m``). The sequences are
synthetic page-like text cut at random lengths with a fixed action at the end; the rounding does not depend on the
words. Prints a table and one JSON line with the bf16 / fp32 ratio of the mean per-token difference.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from webrl.config import get_settings
from webrl.models.adapters import is_adapter, load_trainable
from webrl.models.examples import EncodedExample, collate, pad_id_of
from webrl.models.logprobs import sequence_logprobs

SHIPPED = Path(__file__).resolve().parent.parent / "webrl" / "assets" / "actor-sft-smollm2"
WORDS = ["Product", "SKU", "Price", "Quantity", "Status", "Customer", "Email", "Order", "Grand Total", "Search",
         "Reset Filter", "link", "button", "textbox", "combobox", "row", "cell", "Electronics", "Books", "review",
         "rating", "forum", "post", "comment", "merge request", "issue", "project"]
ACTION = 'do(action="Click", element="31")'


def synthetic(tokenizer, n: int, lengths: tuple[int, int], action_tokens: int, seed: int) -> list[EncodedExample]:
    rng = random.Random(seed)
    action = list(tokenizer(ACTION, add_special_tokens=False)["input_ids"])[:action_tokens]
    out = []
    for _ in range(n):
        words = " ".join(f"[{rng.randrange(1000)}] {rng.choice(WORDS)}" for _ in range(lengths[1]))
        page = list(tokenizer(words, add_special_tokens=False)["input_ids"])[: rng.randint(*lengths)]
        out.append(EncodedExample(page + action, [0] * len(page) + [1] * len(action)))
    return out


@torch.no_grad()
def logprobs(model, examples: list[EncodedExample], pad_id: int, batch_size: int) -> torch.Tensor:
    """Per-token action log-prob of every example, batched in the given order."""
    out = []
    for start in range(0, len(examples), batch_size):
        batch = collate(examples[start:start + batch_size], pad_id)
        lp, n = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["target_mask"])
        out.append(lp / n.clamp(min=1))
    return torch.cat(out)


def measure(model, examples: list[EncodedExample], pad_id: int) -> dict[str, float | torch.Tensor]:
    """Batch of one against padded batches of four: mean and max per-token |difference|, and the lone log-probs."""
    alone = logprobs(model, examples, pad_id, 1)
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].input_ids))  # padded batches, as bucketed
    batched = torch.empty_like(alone)
    batched[order] = logprobs(model, [examples[i] for i in order], pad_id, 4)
    diff = (batched - alone).abs()
    return {"mean_abs": float(diff.mean()), "max_abs": float(diff.max()), "lp_mean": float(alone.mean()),
            "alone": alone}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=SHIPPED)
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--tokens", default="300,900", help="min,max page tokens")
    parser.add_argument("--action", type=int, default=16, help="action tokens scored")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    low, high = (int(x) for x in args.tokens.split(","))
    settings = get_settings()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(args.model), local_files_only=True)
    examples = synthetic(tokenizer, args.sequences, (low, high), args.action, args.seed)
    pad_id = pad_id_of(tokenizer)
    results = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        if is_adapter(args.model):
            model = load_trainable(args.model, settings, dtype, lora=None)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(args.model), local_files_only=True, dtype=dtype)
        results[name] = measure(model.eval(), examples, pad_id)
        del model
    precision = float((results["bf16"]["alone"] - results["fp32"]["alone"]).abs().mean())
    table = Table(title=f"per-token action log-prob, batch of 1 vs padded batch of 4 ({args.sequences} sequences)")
    for column in ("base dtype", "mean |diff|", "max |diff|", "mean lp"):
        table.add_column(column, justify="right")
    for name in ("fp32", "bf16"):
        r = results[name]
        table.add_row(name, f"{r['mean_abs']:.4f}", f"{r['max_abs']:.4f}", f"{r['lp_mean']:.3f}")
    Console().print(table)
    ratio = results["bf16"]["mean_abs"] / max(results["fp32"]["mean_abs"], 1e-9)
    print(f"bf16 batching noise / fp32: {ratio:.1f}x; bf16 vs fp32 (batch of 1): {precision:.4f} per token")
    print(json.dumps({"fp32_mean_abs": results["fp32"]["mean_abs"], "bf16_mean_abs": results["bf16"]["mean_abs"],
                      "bf16_max_abs": results["bf16"]["max_abs"], "ratio": ratio, "bf16_vs_fp32": precision}))


if __name__ == "__main__":
    main()
