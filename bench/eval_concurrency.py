"""Evaluation throughput of a model policy: seconds to roll out the first N test tasks at several
(concurrency, chunk) settings, as ratios against the baseline (4 episodes at once, chunks of 16 tasks),
each setting run twice, interleaved, in the same run.

Concurrency lets the policy batch the prompts of several episodes into one ``generate`` call; a larger chunk
(tasks per rollout job) wastes less time waiting for a chunk's slowest episode.

    .venv/bin/python bench/eval_concurrency.py [--actor webrl/assets/actor-sft] [--tasks 64] [--settings 4x16,8x32]

Runs in a temporary home on free ports (the sandbox sites in this process, the embedded queue).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from isolated_home import isolated_home  # noqa: E402  (bench/isolated_home.py, next to this script)


def _parse_settings(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        concurrency, chunk = part.lower().split("x")
        out.append((int(concurrency), int(chunk)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actor", default=str(REPO / "webrl" / "assets" / "actor-sft"))
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--settings", default="4x16,8x32", help="concurrency x chunk, the first is the baseline")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    isolated_home("webrl-bench-eval-")

    from webrl.clients import rollout_run
    from webrl.config import get_settings
    from webrl.contracts import CheckpointSpec, RolloutRequest
    from webrl.db.migrate import upgrade
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import build_suite, load_suite, task_key

    settings = get_settings()
    upgrade(settings)
    load_suite(settings, 0)
    keys = [task_key("test", t) for t in build_suite(0)["test"]][:args.tasks]
    grid = _parse_settings(args.settings)
    seconds: dict[tuple[int, int], list[float]] = {g: [] for g in grid}
    steps: dict[tuple[int, int], int] = dict.fromkeys(grid, 0)
    attempt = 0
    console = Console()
    with running_sandbox(settings, sandbox_ports(settings)):
        for repeat in range(args.repeats):
            for concurrency, chunk in grid:
                attempt += 1  # a new attempt: rollouts are idempotent per (task, phase, attempt, run)
                start = time.perf_counter()
                ids: list[int] = []
                for at in range(0, len(keys), chunk):
                    result = rollout_run(RolloutRequest(
                        task_keys=keys[at:at + chunk], phase=0, attempt=attempt, purpose="eval",
                        policy=CheckpointSpec(path=args.actor), concurrency=concurrency))
                    ids.extend(result.trajectory_ids)
                seconds[(concurrency, chunk)].append(time.perf_counter() - start)
                steps[(concurrency, chunk)] = _steps(settings, ids)
                console.print(f"repeat {repeat}: {concurrency} x {chunk}: {seconds[(concurrency, chunk)][-1]:.1f} s")
    base = sum(seconds[grid[0]]) / len(seconds[grid[0]])
    table = Table(title=f"evaluation of {len(keys)} test tasks ({Path(args.actor).name})")
    for column in ("concurrency", "chunk", "mean s", "env steps", "speed-up vs first"):
        table.add_column(column, justify="right")
    for g in grid:
        mean = sum(seconds[g]) / len(seconds[g])
        table.add_row(str(g[0]), str(g[1]), f"{mean:.1f}", str(steps[g]), f"{base / mean:.2f}x")
    console.print(table)


def _steps(settings, trajectory_ids: list[int]) -> int:  # type: ignore[no-untyped-def]
    from sqlalchemy import func, select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        return int(session.scalar(select(func.count()).select_from(m.Step)
                                  .where(m.Step.trajectory_id.in_(trajectory_ids))) or 0)


if __name__ == "__main__":
    main()
