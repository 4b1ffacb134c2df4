"""Exact actions of SFT actors on held-out oracle steps: demonstrations of train tasks that neither shipped actor's
``webrl bootstrap`` sampled (another seed's per-template sample, minus those tasks), each actor greedy-decoding
every step. The baseline is the shipped tiny actor (``webrl/assets/actor-sft``), measured in the same run.

    .venv/bin/python bench/heldout_steps.py --actor PATH [--baseline PATH] [--per-template 1] [--limit 200]

Runs in a fresh temporary home (the sandbox sites on free ports, embedded jobs). Prints a table and one JSON
object: per actor the exact-action rate, parse rate, click-element rate, and ``ratio_vs_baseline``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from isolated_home import isolated_home
from sft_grounding import add_ratios, emit_json, evaluate

SHIPPED_TINY = Path(__file__).parents[1] / "webrl" / "assets" / "actor-sft"
BOOTSTRAP_SEED = 0
#: The per-template samples the shipped actors trained on (excluded here): the SmolLM2 adapter's two stages (4 per
#: template; then 1 per template, 3 on reddit and gitlab: webrl/assets/PROVENANCE.md) and the tiny actor's 12.
TRAINED_SAMPLES: tuple[tuple[int, dict[str, int] | None], ...] = (
    (4, None), (1, {"reddit": 3, "gitlab": 3}), (12, None))


def held_out_tasks(per_template: int, seed: int) -> list[str]:
    """Keys of ``per_template`` train tasks per template that neither shipped actor's bootstrap sample contains."""
    from webrl.orchestration.bootstrap import demo_tasks
    from webrl.sandbox.tasks.suite import build_suite, task_key

    train = build_suite(BOOTSTRAP_SEED)["train"]
    used = {t.task_id for n, per_site in TRAINED_SAMPLES for t in demo_tasks(train, n, BOOTSTRAP_SEED, per_site)}
    pool = [t for t in train if t.task_id not in used]
    return [task_key("train", t) for t in demo_tasks(pool, per_template, seed)]


def demonstrations(settings, keys: list[str]) -> list[int]:
    """Oracle rollouts of ``keys`` (purpose "sft"); the ids of the successful ones."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import load_suite
    from webrl.wire.clients import rollout_run
    from webrl.wire.contracts import OracleSpec, RolloutRequest

    upgrade(settings)
    load_suite(settings, BOOTSTRAP_SEED)
    with running_sandbox(settings, sandbox_ports(settings)):
        ids = rollout_run(RolloutRequest(task_keys=keys, phase=0, attempt=0, purpose="sft",
                                         policy=OracleSpec(corrupt=0.0, seed=0), concurrency=4)).trajectory_ids
    with session_scope(settings) as s:
        return sorted(s.scalars(select(m.TrajectoryRow.id).where(m.TrajectoryRow.id.in_(ids),
                                                               m.TrajectoryRow.env_score >= 0.5)).all())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actor", required=True, help="The SFT actor to measure (full or adapter folder).")
    parser.add_argument("--baseline", default=str(SHIPPED_TINY), help="The actor it is compared with.")
    parser.add_argument("--per-template", type=int, default=1, help="Held-out demonstrations per template.")
    parser.add_argument("--seed", type=int, default=1, help="Seed of the held-out sample.")
    parser.add_argument("--limit", type=int, default=200, help="Most steps evaluated.")
    parser.add_argument("--out", type=Path, help="Also write the JSON here.")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from webrl.config import get_settings

    isolated_home("heldout-")
    settings = get_settings()
    ids = demonstrations(settings, held_out_tasks(args.per_template, args.seed))
    results = {}
    for name, path in (("baseline", args.baseline), ("actor", args.actor)):
        results[name] = {"path": str(path), **evaluate(settings, str(path), ids, settings.actor.max_prompt_tokens,
                                                        args.limit)}
    add_ratios(results)
    table = Table(title=f"held-out oracle steps ({results['actor']['steps']} steps, {len(ids)} demonstrations)")
    for column in ("actor", "exact", "parsed", "click element", "target visible"):
        table.add_column(column)
    for name, r in results.items():
        table.add_row(f"{name}: {Path(r['path']).name}", f"{r['exact']:.1%}", f"{r['parsed']:.1%}",
                      f"{r['click_element']:.1%}", f"{r['target_visible']:.1%}")
    Console().print(table)
    emit_json(results, args.out)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
