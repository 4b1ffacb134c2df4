"""Does training the head ORM's backbone beat the frozen head? Held-out accuracy of each epoch against the frozen
head's, on the same prompts, in the same run (``webrl train-orm --backbone-epochs``).

Two steps, so that the training can run where a GPU is: the labelled rollouts need the sandbox and Chromium, the
training only the rendered prompts.

    # in the home where `webrl train-orm` stored its rollouts: the ORM prompts, labels, tasks and policies
    WEBRL_HOME=<home> .venv/bin/python bench/orm_backbone.py export --train-tasks 120 --out orm-data.json
    # anywhere with the base (converted from the installed wheel on first use)
    .venv/bin/python bench/orm_backbone.py run --data orm-data.json --epochs 3 --lr 1e-4,3e-4 --json rows.json

``run`` reads the frozen base's last-token states, fits the shipped head (L2 chosen on held-out train tasks), then
for each learning rate trains a new LoRA adapter with that head (:mod:`services.trainer.orm_backbone`, the code
``train.orm_head`` runs) and after every epoch scores the held-out train tasks (which choose the epoch) and the
test split (reported only). It prints accuracy at 0.5, AUC and accuracy on each policy's test trajectories.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from webrl.models.orm import roc_auc
from webrl.prompts.orm_prompt import SMALL_ORM_MAX_PROMPT_TOKENS

BASE = "smollm2-135m"


def export(args: argparse.Namespace) -> None:
    from orm_heads import stored  # bench/orm_heads.py: the stored ORM trajectories of a split

    from services.trainer.orm_head_fit import labelled_prompts
    from webrl.config import get_settings
    from webrl.models.loading import load_tokenizer
    from webrl.models.pretrained_base import ensure_base

    settings = get_settings()
    tokenizer = load_tokenizer(ensure_base(settings, BASE), settings)
    out: dict[str, Any] = {"max_prompt_tokens": args.max_prompt_tokens}
    for split, tasks in (("train", args.train_tasks), ("test", None)):
        data = stored(split, tasks)
        prompts, labels, keys = labelled_prompts(settings, data.ids, tokenizer, args.max_prompt_tokens)
        out[split] = {"prompts": prompts, "labels": labels.tolist(), "tasks": keys, "policies": data.policies}
        Console().print(f"{split}: {len(prompts)} prompts, {int(labels.sum())} successes, {len(set(keys))} tasks")
    Path(args.out).write_text(json.dumps(out))


def test_row(p: list[float], test: dict[str, Any]) -> dict[str, float]:
    right = [int(pi >= 0.5) == yi for pi, yi in zip(p, test["labels"], strict=True)]
    row = {"test accuracy": sum(right) / len(right), "test AUC": roc_auc(p, test["labels"]) or 0.0}
    for policy in sorted(set(test["policies"])):
        mine = [r for r, q in zip(right, test["policies"], strict=True) if q == policy]
        row[f"policy {policy}"] = sum(mine) / len(mine)
    return row


@torch.no_grad()
def probabilities(orm: Any, tokenizer: Any, prompts: list[str], batch_size: int) -> list[float]:
    """P(success) of each prompt from a :class:`webrl.models.orm_head.TunableOrm` as it stands."""
    from webrl.models.critic import encode_states
    from webrl.models.orm_head import success_probability

    was_training = orm.training
    orm.eval()
    device = next(orm.parameters()).device
    out: list[float] = []
    for start in range(0, len(prompts), batch_size):
        input_ids, mask = encode_states(tokenizer, prompts[start:start + batch_size], device)
        out += success_probability(orm(input_ids, mask)).tolist()
    orm.train(was_training)
    return out


def run(args: argparse.Namespace) -> None:
    from services.trainer.orm_backbone import train_backbone
    from services.trainer.sft import lora_base_dtype
    from services.trainer.training_loop import LoopConfig
    from webrl.config import get_settings
    from webrl.models.adapters import LoraSpec, load_trainable
    from webrl.models.loading import load_tokenizer
    from webrl.models.orm_head import (
        choose_and_fit,
        fit_head,
        held_out_tasks,
        load_backbone,
        prompt_features,
        success_probability,
    )
    from webrl.models.pretrained_base import ensure_base

    console = Console(width=200)  # the table is wide; a job's output has no terminal to measure
    data = json.loads(Path(args.data).read_text())
    train, test = data["train"], data["test"]
    settings = get_settings()
    base = Path(args.base) if args.base else ensure_base(settings, BASE)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    console.print(f"{len(train['prompts'])} train prompts ({sum(train['labels'])} successes), {len(test['prompts'])} "
                  f"test ({sum(test['labels'])}); base {base}; {device} "
                  f"({torch.cuda.get_device_name() if device == 'cuda' else f'{torch.get_num_threads()} threads'})")
    tokenizer = load_tokenizer(base, settings)
    started = time.monotonic()
    backbone = load_backbone(base, settings).to(device)
    train_x = prompt_features(backbone, tokenizer, train["prompts"], args.batch_size)
    test_x = prompt_features(backbone, tokenizer, test["prompts"], args.batch_size)
    del backbone
    labels = torch.tensor(train["labels"])
    fit = choose_and_fit(train_x, labels, train["tasks"], args.seed)
    with torch.no_grad():
        frozen = test_row(success_probability(fit.head(test_x)).tolist(), test)
    rows: list[dict[str, Any]] = [{"run": "frozen head (all train tasks)", "epoch": 0, **frozen,
                                   "seconds": time.monotonic() - started}]
    console.print(f"frozen head: lambda {fit.l2:g}, test accuracy {frozen['test accuracy']:.3f} "
                  f"({rows[0]['seconds']:.0f} s of features)")
    held_out = held_out_tasks(train["tasks"], args.seed)
    with torch.no_grad():  # epoch 0 of a run: the frozen head fitted on the train tasks that are not held out
        head0 = fit_head(train_x[~held_out], labels[~held_out], fit.l2)
        frozen_on_split = test_row(success_probability(head0(test_x)).tolist(), test)
    for lr in [float(x) for x in args.lr.split(",")]:
        torch.manual_seed(args.seed)  # the new adapter's A (B = 0: epoch 0 scores as the frozen base)
        model = load_trainable(base, settings, lora_base_dtype(), lora=LoraSpec(rank=args.rank, alpha=2 * args.rank))
        config = LoopConfig(lr=lr, epochs=args.epochs, batch_size=args.batch_size, seed=args.seed)
        run_rows: list[dict[str, Any]] = []

        def on_epoch(record: dict[str, float], orm: Any, lr: float = lr, run_rows: list = run_rows) -> None:
            scored = frozen_on_split if orm is None else test_row(
                probabilities(orm, tokenizer, test["prompts"], args.batch_size), test)
            run_rows.append({"run": f"backbone lr {lr:g}", **record, **scored})
            row = run_rows[-1]
            console.print(f"lr {lr:g} epoch {row['epoch']}: held-out train tasks "
                          f"{row['validation_balanced_accuracy']:.3f}, test accuracy {row['test accuracy']:.3f} "
                          f"AUC {row['test AUC']:.3f} ({row['seconds']:.0f} s)")

        kept = train_backbone(model, tokenizer, train["prompts"], labels, held_out, fit, train_x, config, on_epoch)
        for row in run_rows:
            row["kept"] = row["epoch"] == kept.epoch
        rows += run_rows
        del model
    table = Table(title=f"head ORM, backbone trained or not: {len(test['prompts'])} held-out test trajectories")
    columns = ["run", "epoch", "validation_balanced_accuracy", "test accuracy", "test AUC",
               *sorted(k for k in rows[0] if k.startswith("policy ")), "seconds", "kept"]
    for column in columns:
        table.add_column(column.replace("validation_balanced_accuracy", "held-out train tasks (bal. acc.)"))
    for row in rows:
        table.add_row(*("" if row.get(c) is None else f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c])
                        for c in columns))
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="the stored ORM trajectories as prompts, labels, tasks and policies")
    ex.add_argument("--train-tasks", type=int, help="only the train-orm sample of this many train tasks")
    ex.add_argument("--max-prompt-tokens", type=int, default=SMALL_ORM_MAX_PROMPT_TOKENS)
    ex.add_argument("--out", required=True)
    rn = sub.add_parser("run", help="the frozen head, then the backbone trained with it")
    rn.add_argument("--data", required=True)
    rn.add_argument("--base", help=f"base folder (default: {BASE}, converted from its wheel)")
    rn.add_argument("--epochs", type=int, default=3)
    rn.add_argument("--lr", default="2e-4", help="comma-separated learning rates, a fresh adapter each")
    rn.add_argument("--rank", type=int, default=16)
    rn.add_argument("--batch-size", type=int, default=8)
    rn.add_argument("--seed", type=int, default=0)
    rn.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    export(args) if args.command == "export" else run(args)


if __name__ == "__main__":
    main()
