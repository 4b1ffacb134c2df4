"""Which backbone and how much data a classification-head ORM needs: test accuracy of heads on cached features.

``webrl train-orm --objective head`` stores its labelled rollouts (purpose "orm", each policy's attempt naming its
index: ``orm_attempt``) and caches the backbone's features of every training prompt
(``<artifacts>/cache/orm-features``). This bench reads the same trajectories, renders the same ORM prompts
(``--max-prompt-tokens``, 768 as train-orm on SmolLM2), takes each backbone's features from that cache (reading the
missing ones: the test split's the first time), and fits the shipped head (L2 chosen on held-out train tasks,
:func:`webrl.models.orm_head.choose_and_fit`) on

- all the train trajectories, per backbone (``--backbone``, repeatable: the ORM start's folder, or an adapter such
  as the SFT actor's, whose features may know the sites better);
- a share of the train tasks (``--shares``, ``--seeds`` draws each): how accuracy grows with labelled data;
- the train trajectories of some policies only (``--policies``: e.g. the oracles' without the SFT actor's);
- ``--train-tasks N``: every row on the sample of N train tasks that ``webrl train-orm --train-tasks N`` picks (a
  smaller run's data, when a larger one is stored in the same home);
- ``--train-prior``: all the train trajectories, the head's verdict moved from even odds to their base rate.

It prints, per row, held-out accuracy at 0.5, AUC and accuracy on each policy's test trajectories.

    WEBRL_HOME=<home of the train-orm run> .venv/bin/python bench/orm_heads.py \\
        --backbone <artifacts>/models/orm-start/orm-start-... [--backbone webrl/assets/actor-sft-smollm2] \\
        [--shares 0.25,0.5,1] [--seeds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy import select

from services.trainer.orm_head_fit import FEATURE_CACHE_DIR, labelled_prompts
from webrl.config import get_settings
from webrl.db import models as m
from webrl.db.session import session_scope
from webrl.method.rewards import is_success
from webrl.models.feature_cache import FeatureCache
from webrl.models.loading import load_tokenizer
from webrl.models.orm import roc_auc
from webrl.models.orm_head import choose_and_fit, load_backbone, prompt_features, success_probability
from webrl.orchestration.train_orm import ORM_ATTEMPT_BASE, ORM_POLICY_SLOTS, ORM_PURPOSE, split_keys
from webrl.prompts.orm_prompt import SMALL_ORM_MAX_PROMPT_TOKENS


@dataclass
class Labelled:
    """The stored ORM trajectories of one split: ids, labels, task keys and policy indices."""

    ids: list[int]
    labels: list[int]
    tasks: list[str]
    policies: list[int]


def stored(split: str, tasks: int | None = None) -> Labelled:
    """The split's scored ORM trajectories; with ``tasks``, only those of the seeded sample of that many tasks
    that ``webrl train-orm --train-tasks`` picks (seed 0)."""
    settings = get_settings()
    keep = set(split_keys(settings, split, tasks, 0)) if tasks else None
    with session_scope(settings) as session:
        rows = session.execute(select(m.TrajectoryRow.id, m.TrajectoryRow.env_score, m.Task.key,
                                      m.TrajectoryRow.attempt)
                               .join(m.Task, m.Task.id == m.TrajectoryRow.task_id)
                               .where(m.TrajectoryRow.purpose == ORM_PURPOSE, m.Task.split == split,
                                      m.TrajectoryRow.env_score.is_not(None))
                               .order_by(m.TrajectoryRow.id)).all()
    rows = [r for r in rows if keep is None or r[2] in keep]
    if not rows:
        raise SystemExit(f"no scored {split}-split ORM trajectories in this home: run `webrl train-orm` first")
    return Labelled(ids=[r[0] for r in rows], labels=[int(is_success(r[1])) for r in rows],
                    tasks=[r[2] for r in rows], policies=[(r[3] - ORM_ATTEMPT_BASE) % ORM_POLICY_SLOTS for r in rows])


def features(backbone: str, data: list[Labelled], budget: int, console: Console) -> list[torch.Tensor]:
    """The backbone's cached features of each split's ORM prompts, rendered as ``train.orm_head`` renders them
    (the missing ones read and cached)."""
    settings = get_settings()
    tokenizer = load_tokenizer(backbone, settings)
    cache = FeatureCache.for_backbone(Path(str(settings.artifacts_dir)) / FEATURE_CACHE_DIR, backbone)
    model: list[object] = []  # loaded when a prompt is missing from the cache

    with Progress(console=console, transient=True) as progress:
        def compute(chunk: list[str]) -> torch.Tensor:
            if not model:
                model.append(load_backbone(backbone, settings))
            return prompt_features(model[0], tokenizer, chunk, 4, lambda n: progress.advance(bar, n))

        out = []
        for split in data:
            prompts, _, _ = labelled_prompts(settings, split.ids, tokenizer, budget)
            missing = cache.count_missing(prompts)
            bar = progress.add_task(f"features of {len(prompts)} prompts, {missing} to read", total=missing)
            out.append(cache.features(prompts, compute))
    return out


def evaluate(train_x: torch.Tensor, train: Labelled, keep: list[bool], test_x: torch.Tensor, test: Labelled,
             seed: int, train_prior: bool = False) -> dict[str, float]:
    """Fit the shipped head on the kept train rows; accuracy, AUC and per-policy accuracy on the test split.

    The head is fitted class-balanced, so its P(success) assumes even odds; with ``train_prior`` the success logit
    is moved by the training rows' log-odds, log(pi / (1 - pi)), so that 0.5 is the threshold for their base rate."""
    index = [i for i, k in enumerate(keep) if k]
    y = torch.tensor([train.labels[i] for i in index])
    fit = choose_and_fit(train_x[index], y, [train.tasks[i] for i in index], seed)
    with torch.no_grad():
        logits = fit.head(test_x)
        if train_prior:
            base_rate = float(y.float().mean())
            logits[:, 1] += math.log(base_rate / (1 - base_rate))
        p = success_probability(logits).tolist()
    right = [int(pi >= 0.5) == yi for pi, yi in zip(p, test.labels, strict=True)]
    row = {"n": float(len(index)), "accuracy": sum(right) / len(right), "auc": roc_auc(p, test.labels) or 0.0}
    for policy in sorted(set(test.policies)):
        mine = [r for r, q in zip(right, test.policies, strict=True) if q == policy]
        row[f"policy {policy}"] = sum(mine) / len(mine)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", action="append", required=True, help="backbone folder (repeat)")
    parser.add_argument("--max-prompt-tokens", type=int, default=SMALL_ORM_MAX_PROMPT_TOKENS)
    parser.add_argument("--shares", default="0.25,0.5,1", help="shares of the train tasks (first backbone)")
    parser.add_argument("--seeds", type=int, default=3, help="draws per share below 1")
    parser.add_argument("--policies", default="", help="policy index sets to train on, e.g. '0,1,2;3' (first backbone)")
    parser.add_argument("--train-tasks", type=int, help="only the train-orm sample of this many train tasks")
    parser.add_argument("--train-prior", action="store_true",
                        help="a row more: all train rows, the head's success logit moved to their base rate")
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    console = Console()
    train, test = stored("train", args.train_tasks), stored("test")
    console.print(f"train: {len(train.ids)} trajectories ({sum(train.labels)} successes) of {len(set(train.tasks))} "
                  f"tasks; test: {len(test.ids)} ({sum(test.labels)} successes)")
    rows: list[tuple[str, dict[str, float]]] = []
    everything = [True] * len(train.ids)
    cached: dict[str, list[torch.Tensor]] = {}
    for backbone in args.backbone:
        cached[backbone] = features(backbone, [train, test], args.max_prompt_tokens, console)
        rows.append((f"{Path(backbone).name}: all", evaluate(cached[backbone][0], train, everything,
                                                             cached[backbone][1], test, 0)))
    first_x, first_test_x = cached[args.backbone[0]]
    tasks = sorted(set(train.tasks))
    for share in [float(s) for s in args.shares.split(",") if s and float(s) < 1]:
        draws = []
        for seed in range(args.seeds):
            chosen = set(random.Random(seed).sample(tasks, max(2, round(share * len(tasks)))))
            draws.append(evaluate(first_x, train, [t in chosen for t in train.tasks], first_test_x, test, seed))
        rows.append((f"share {share:g} (mean of {args.seeds})",
                     {k: statistics.mean(d[k] for d in draws) for k in draws[0]}))
    for group in [g for g in args.policies.split(";") if g]:
        keep_policies = {int(p) for p in group.split(",")}
        rows.append((f"policies {group}", evaluate(first_x, train, [p in keep_policies for p in train.policies],
                                                   first_test_x, test, 0)))
    if args.train_prior:
        rows.append((f"{Path(args.backbone[0]).name}: all, train prior", evaluate(first_x, train, everything,
                                                                                 first_test_x, test, 0, True)))
    table = Table(title="classification-head ORM, held-out test split")
    columns = list(rows[0][1])
    table.add_column("head trained on")
    for column in columns:
        table.add_column(column, justify="right")
    for name, row in rows:
        table.add_row(name, *(f"{row[c]:.0f}" if c == "n" else f"{row[c]:.3f}" for c in columns))
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps([{"row": n, **r} for n, r in rows], indent=2))


if __name__ == "__main__":
    main()
