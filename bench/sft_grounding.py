"""SFT recipes for the tiny actor, compared offline on held-out oracle steps against the bootstrap's default recipe
trained in the same run.

    .venv/bin/python bench/sft_grounding.py --home HOME [--minutes 8] [--variant NAME:field=value,...] ...

HOME is a webrl home where ``webrl bootstrap`` has stored oracle demonstrations (purpose "sft") and built the base
model (``artifacts/models/actor-base-<size>-seed<seed>``). Its demonstrated tasks are split 80/20 by task; every
variant SFTs the same base on the train part for the same wall-clock minutes (one CPU thread each, all variants at
once), then greedy-decodes an action for every held-out step. A step is right when the parsed action equals the
oracle's (type, element, argument). Variants set ``SftJob`` fields (``prompt_loss_weight=0.5``, ``lr=1e-3``...) and
``prompt_tokens`` (the actor prompt budget used for training and evaluation).

Prints a table and one JSON object: per variant the held-out exact-action accuracy, click-element accuracy,
parse rate, the share of steps whose target element survived the prompt cut, and the ratio of its accuracy to
the baseline's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

DEFAULT_RECIPE: dict[str, Any] = {"epochs": 3, "lr": 2e-3, "batch_size": 4, "warmup_steps": 20, "cosine": True}


def parse_variant(spec: str) -> tuple[str, dict[str, Any]]:
    """``name:field=value,field=value`` -> (name, overrides); values are read as JSON when they parse."""
    name, _, body = spec.partition(":")
    overrides: dict[str, Any] = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        try:
            overrides[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value
    return name, overrides


def held_out(task_key: str, share: float = 0.2) -> bool:
    """A stable 20% of tasks, by a hash of the task key (so every variant and run splits alike)."""
    return int(hashlib.sha256(task_key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


def split_trajectories(settings: Any) -> tuple[list[int], list[int]]:
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        rows = session.execute(select(m.TrajectoryRow.id, m.Task.key).join(m.Task)
                               .where(m.TrajectoryRow.purpose == "sft", m.TrajectoryRow.env_score >= 0.5)).all()
    train = sorted(i for i, key in rows if not held_out(key))
    test = sorted(i for i, key in rows if held_out(key))
    return train, test


def evaluate(settings: Any, path: str, trajectory_ids: list[int], prompt_tokens: int, limit: int) -> dict[str, float]:
    """Greedy actions of the model at ``path`` on every step of the held-out trajectories (at most ``limit``)."""
    from webrl.agent.actions import ActionParseError, parse_action
    from webrl.db.repository import load_trajectory
    from webrl.db.session import session_scope
    from webrl.models.backends.local import LocalBackend
    from webrl.prompts.actor import render_actor_prompt

    backend = LocalBackend.from_path(path, settings)
    prompts, oracles = [], []
    with session_scope(settings) as session:
        from webrl.db import models as m

        for tid in trajectory_ids:
            traj = load_trajectory(session.get(m.TrajectoryRow, tid))
            for t, step in enumerate(traj.steps[:limit - len(prompts)]):  # render no more than are evaluated
                prompts.append(render_actor_prompt(backend.tokenizer, traj.intent, traj.steps[:t],
                                                   step.observation.html, max_tokens=prompt_tokens))
                oracles.append(parse_action(step.response))
            if len(prompts) >= limit:
                break
    generations = backend.generate(prompts, max_new_tokens=64, temperature=0.0)
    backend.close()
    right = parsed = visible = visible_right = clicks = clicks_right = 0
    by_type: dict[str, list[int]] = {}  # oracle action type -> [right, steps]
    for prompt, oracle, gen in zip(prompts, oracles, generations, strict=True):
        shown = oracle.element is None or f'id="{oracle.element}"' in prompt
        visible += shown
        tally = by_type.setdefault(oracle.type.value, [0, 0])
        tally[1] += 1
        try:
            action = parse_action(gen.text)
        except ActionParseError:
            continue
        parsed += 1
        ok = action.format() == oracle.format()  # the canonical text, as early stopping compares actions
        right += ok
        tally[0] += ok
        visible_right += ok and shown
        if oracle.type.value == "Click":
            clicks += 1
            clicks_right += action.element == oracle.element
    n = max(1, len(prompts))
    return {"steps": len(prompts), "exact": right / n, "parsed": parsed / n, "target_visible": visible / n,
            "exact_when_visible": visible_right / max(1, visible), "click_element": clicks_right / max(1, clicks),
            "exact_by_type": {kind: f"{ok}/{total}" for kind, (ok, total) in sorted(by_type.items())}}


def add_ratios(results: dict[str, dict[str, Any]]) -> None:
    """Each result's ``ratio_vs_baseline``: its exact-action rate over the "baseline" entry's (None when that is 0)."""
    baseline = results["baseline"]["exact"]
    for result in results.values():
        result["ratio_vs_baseline"] = round(result["exact"] / baseline, 3) if baseline else None


def emit_json(results: dict[str, Any], out: Path | None) -> None:
    """Print ``results`` as JSON, and write it to ``out`` when given."""
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if out:
        out.write_text(text)


def run_variant(home: str, base: str, name: str, overrides: dict[str, Any], minutes: float,
                limit: int) -> dict[str, Any]:
    """One variant in its own process with one thread: SFT on the train split, then the held-out evaluation."""
    os.environ["WEBRL_HOME"] = home
    import torch

    torch.set_num_threads(1)
    from services.trainer.sft import COMPLETION_BUDGET, run_sft
    from webrl.config import Settings
    from webrl.wire.contracts import SftJob

    settings = Settings()
    recipe = {**DEFAULT_RECIPE, **overrides}
    prompt_tokens = int(recipe.pop("prompt_tokens", settings.actor.max_prompt_tokens))
    train_ids, test_ids = split_trajectories(settings)
    settings.ensure_dirs()
    out = Path(tempfile.mkdtemp(prefix=f"sft-{name}-", dir=settings.artifacts_dir))  # the trainer writes only there
    job = SftJob(base=base, output=str(out / "actor"), kind="actor", trajectory_ids=train_ids, purpose="sft",
                 seed=0, max_minutes=minutes, max_length=prompt_tokens + COMPLETION_BUDGET, **recipe)
    info = run_sft(settings, job)
    assert info is not None
    result = evaluate(settings, info.path, test_ids, prompt_tokens, limit)
    metrics = info.metrics or {}
    return {**result, "sft_steps": metrics.get("steps"), "last_loss": metrics.get("last_loss"),
            "train_trajectories": len(train_ids), "test_trajectories": len(test_ids),
            "recipe": {**recipe, "prompt_tokens": prompt_tokens}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", required=True, help="webrl home holding the sft demonstrations and base model")
    parser.add_argument("--base", help="base model folder (default: the home's only actor-base-* folder)")
    parser.add_argument("--minutes", type=float, default=8.0, help="SFT wall-clock minutes per variant")
    parser.add_argument("--limit", type=int, default=400, help="held-out steps evaluated per variant")
    parser.add_argument("--variant", action="append", default=[], help="NAME:field=value,... (repeatable)")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    base = args.base
    if base is None:
        found = sorted((Path(args.home) / "artifacts" / "models").glob("actor-base-*"))
        if len(found) != 1:
            parser.error(f"--base: expected one actor-base-* folder in {args.home}, found {len(found)}")
        base = str(found[0])
    variants = [("baseline", {}), *(parse_variant(v) for v in args.variant)]
    with ProcessPoolExecutor(len(variants), mp_context=mp.get_context("spawn")) as pool:
        futures = {name: pool.submit(run_variant, args.home, base, name, overrides, args.minutes, args.limit)
                   for name, overrides in variants}
        results = {name: future.result() for name, future in futures.items()}
    add_ratios(results)
    print(f"{'variant':<16} {'exact':>6} {'click':>6} {'parsed':>6} {'visible':>7} {'steps':>6} {'loss':>7} ratio")
    for name, r in results.items():
        print(f"{name:<16} {r['exact']:6.3f} {r['click_element']:6.3f} {r['parsed']:6.3f} {r['target_visible']:7.3f}"
              f" {r['sft_steps'] or 0:6d} {r['last_loss'] or 0:7.3f} {r['ratio_vs_baseline']}")
    emit_json(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
