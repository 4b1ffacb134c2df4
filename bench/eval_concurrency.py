"""Evaluation throughput of a model policy: seconds to roll out the first N test tasks at several
(concurrency, chunk[, torch threads]) settings, as ratios against the first setting (by default 4 episodes at once,
chunks of 16 tasks), each setting run twice, interleaved, in the same run.

Concurrency lets the policy batch the prompts of several episodes into one ``generate`` call; a larger chunk
(tasks per rollout job) wastes less time waiting for a chunk's slowest episode. ``@T`` after a setting runs it with
``WEBRL_MODELS__TORCH_THREADS=T`` (the embedded policy's intra-op threads, beside Chromium and the sandbox sites).

Every timed run is a fresh process (the sandbox sites, the embedded queue and the policy in it, as in ``webrl
train``): torch fixes a thread's intra-op thread count at its first parallel op, so the local backend's generation
thread cannot be re-threaded in place. Each process first rolls out one task untimed, so loading the model is not
counted; all of them share one temporary home (its database and converted base).

    .venv/bin/python bench/eval_concurrency.py [--actor webrl/assets/actor-sft] [--tasks 64] [--settings 4x16,8x32]
    .venv/bin/python bench/eval_concurrency.py --actor webrl/assets/actor-sft-smollm2 --tasks 16 \\
        --settings 8x16@1,8x16@2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from isolated_home import isolated_home  # noqa: E402  (bench/isolated_home.py, next to this script)

Setting = tuple[int, int, int]  # episodes at once, tasks per rollout job, torch threads (0: torch's default)
WARM_UP = 10_000  # warm-up rollouts' attempt numbers start here, clear of the timed runs'


def _parse_settings(text: str) -> list[Setting]:
    """``CxK[@T]`` items: C episodes at once, chunks of K tasks, T torch threads."""
    out = []
    for part in text.split(","):
        shape, _, threads = part.lower().partition("@")
        concurrency, chunk = shape.split("x")
        out.append((int(concurrency), int(chunk), int(threads or 0)))
    return out


def _test_keys(tasks: int) -> list[str]:
    from webrl.sandbox.tasks.suite import build_suite, task_key

    return [task_key("test", t) for t in build_suite(0)["test"]][:tasks]


def _timed_run(actor: str, tasks: int, setting: Setting, attempt: int) -> None:
    """In a child process: warm the policy up on one task, then time the first ``tasks`` test tasks; prints one
    JSON line (seconds, trajectory ids)."""
    from webrl.config import get_settings
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.wire.clients import rollout_run
    from webrl.wire.contracts import CheckpointSpec, RolloutRequest

    settings = get_settings()
    concurrency, chunk, _ = setting
    keys = _test_keys(tasks)
    policy = CheckpointSpec(path=actor)
    with running_sandbox(settings, sandbox_ports(settings)):
        # a rollout is idempotent per (task, phase, attempt, run): the warm-up and each timed run get their own
        rollout_run(RolloutRequest(task_keys=keys[:1], phase=0, attempt=WARM_UP + attempt, purpose="eval",
                                   policy=policy, concurrency=1))
        start = time.perf_counter()
        ids: list[int] = []
        for at in range(0, len(keys), chunk):
            result = rollout_run(RolloutRequest(task_keys=keys[at:at + chunk], phase=0, attempt=attempt,
                                                purpose="eval", policy=policy, concurrency=concurrency))
            ids.extend(result.trajectory_ids)
        seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "trajectory_ids": ids}))


def _child(args: argparse.Namespace, setting: Setting, attempt: int) -> tuple[float, list[int]]:
    env = dict(os.environ)
    if setting[2]:
        env["WEBRL_MODELS__TORCH_THREADS"] = str(setting[2])
    command = [sys.executable, __file__, "--actor", args.actor, "--tasks", str(args.tasks),
               "--child", f"{setting[0]}x{setting[1]}@{setting[2]}", "--attempt", str(attempt)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the run {setting} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["seconds"]), list(result["trajectory_ids"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actor", default=str(REPO / "webrl" / "assets" / "actor-sft"))
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--settings", default="4x16,8x32", help="CxK[@T], ...; the first is the baseline")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--attempt", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _timed_run(args.actor, args.tasks, _parse_settings(args.child)[0], args.attempt)
        return
    isolated_home("webrl-bench-eval-")  # the children inherit it through the environment

    from webrl.config import get_settings
    from webrl.db.migrate import upgrade
    from webrl.sandbox.tasks.suite import load_suite

    settings = get_settings()
    upgrade(settings)
    load_suite(settings, 0)
    grid = _parse_settings(args.settings)
    seconds: dict[Setting, list[float]] = {g: [] for g in grid}
    steps: dict[Setting, int] = dict.fromkeys(grid, 0)
    attempt = 0
    console = Console()
    for repeat in range(args.repeats):
        for setting in grid:
            attempt += 1
            elapsed, ids = _child(args, setting, attempt)
            seconds[setting].append(elapsed)
            steps[setting] = _steps(settings, ids)
            concurrency, chunk, threads = setting
            console.print(f"repeat {repeat}: {concurrency} x {chunk} @ {threads or 'default'} threads: {elapsed:.1f} s")
    base = sum(seconds[grid[0]]) / len(seconds[grid[0]])
    table = Table(title=f"evaluation of {args.tasks} test tasks ({Path(args.actor).name})")
    for column in ("concurrency", "chunk", "threads", "mean s", "env steps", "speed-up vs first"):
        table.add_column(column, justify="right")
    for g in grid:
        mean = sum(seconds[g]) / len(seconds[g])
        table.add_row(str(g[0]), str(g[1]), str(g[2] or "default"), f"{mean:.1f}", str(steps[g]), f"{base / mean:.2f}x")
    console.print(table)


def _steps(settings, trajectory_ids: list[int]) -> int:  # type: ignore[no-untyped-def]
    from sqlalchemy import func, select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        return int(session.scalar(select(func.count()).select_from(m.StepRow)
                                  .where(m.StepRow.trajectory_id.in_(trajectory_ids))) or 0)


if __name__ == "__main__":
    main()
