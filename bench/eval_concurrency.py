"""Evaluation throughput of a model policy: seconds to roll out the first N test tasks at several
(concurrency, chunk[, torch threads][, kept prompts]) settings, as ratios against the first setting (by default 4
episodes at once, chunks of 16 tasks), each setting run twice, interleaved, in the same run; and whether each setting
took the first one's actions (greedy decoding: it should, task for task).

Concurrency lets the policy batch the prompts of several episodes into one ``generate`` call; a larger chunk
(tasks per rollout job) wastes less time waiting for a chunk's slowest episode. ``@T`` after a setting runs it with
``WEBRL_MODELS__TORCH_THREADS=T`` (the embedded policy's intra-op threads, beside Chromium and the sandbox sites).
``/R`` keeps R whole prompts in the local backend (``WEBRL_ACTOR__KEPT_PROMPTS=R``; 0: only the batch's shared
prefix is reused), so an episode's next step computes only what it does not share with its last prompt.

Every timed run is a fresh process (the sandbox sites, the embedded queue and the policy in it, as in ``webrl
train``): torch fixes a thread's intra-op thread count at its first parallel op, so the local backend's generation
thread cannot be re-threaded in place. Each process first rolls out one task untimed, so loading the model is not
counted; all of them share one temporary home (its database and converted base).

    .venv/bin/python bench/eval_concurrency.py [--actor webrl/assets/actor-sft] [--tasks 64] [--settings 4x16,8x32]
    .venv/bin/python bench/eval_concurrency.py --actor webrl/assets/actor-sft-smollm2 --tasks 16 \\
        --settings 8x16@1,8x16@2
    .venv/bin/python bench/eval_concurrency.py --actor webrl/assets/actor-sft-smollm2 --tasks 40 \\
        --settings 16x65/0,16x65 --repeats 1
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

#: episodes at once, tasks per rollout job, torch threads (0: torch's default), kept prompts (-1: the default)
Setting = tuple[int, int, int, int]
WARM_UP = 10_000  # warm-up rollouts' attempt numbers start here, clear of the timed runs'


def _parse_settings(text: str) -> list[Setting]:
    """``CxK[@T][/R]`` items: C episodes at once, chunks of K tasks, T torch threads, R kept prompts."""
    out = []
    for part in text.split(","):
        part, _, kept = part.lower().partition("/")
        shape, _, threads = part.partition("@")
        concurrency, chunk = shape.split("x")
        out.append((int(concurrency), int(chunk), int(threads or 0), int(kept) if kept else -1))
    return out


def _label(setting: Setting) -> str:
    concurrency, chunk, threads, kept = setting
    return f"{concurrency}x{chunk}" + (f"@{threads}" if threads else "") + (f"/{kept}" if kept >= 0 else "")


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
    concurrency, chunk = setting[:2]
    keys = _test_keys(tasks)
    policy = CheckpointSpec(path=actor)
    with running_sandbox(settings, sandbox_ports(settings)):
        # a rollout is idempotent per (task, phase, attempt, run): the warm-up and each timed run get their own
        rollout_run(RolloutRequest(task_keys=keys[:1], phase=0, attempt=WARM_UP + attempt, purpose="eval",
                                   policy=policy, concurrency=1))
        tokens = _prompt_tokens()
        start = time.perf_counter()
        ids: list[int] = []
        for at in range(0, len(keys), chunk):
            result = rollout_run(RolloutRequest(task_keys=keys[at:at + chunk], phase=0, attempt=attempt,
                                                purpose="eval", policy=policy, concurrency=concurrency))
            ids.extend(result.trajectory_ids)
        seconds = time.perf_counter() - start
    prompt, reused = (after - before for after, before in zip(_prompt_tokens(), tokens, strict=True))
    print(json.dumps({"seconds": seconds, "trajectory_ids": ids, "prompt_tokens": prompt, "reused_tokens": reused}))


def _prompt_tokens() -> tuple[int, int]:
    """Prompt tokens the loaded local backends have decoded, and how many of them came from a cached prefix."""
    from webrl.models.model_policies import loaded_backends

    backends = loaded_backends()
    return sum(b.prompt_tokens for b in backends), sum(b.reused_tokens for b in backends)


def _child(args: argparse.Namespace, setting: Setting, attempt: int) -> tuple[float, list[int], tuple[int, int]]:
    env = dict(os.environ)
    if setting[2]:
        env["WEBRL_MODELS__TORCH_THREADS"] = str(setting[2])
    if setting[3] >= 0:
        env["WEBRL_ACTOR__KEPT_PROMPTS"] = str(setting[3])
    command = [sys.executable, __file__, "--actor", args.actor, "--tasks", str(args.tasks),
               "--child", _label(setting), "--attempt", str(attempt)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the run {setting} failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["seconds"]), list(result["trajectory_ids"]), (result["prompt_tokens"], result["reused_tokens"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actor", default=str(REPO / "webrl" / "assets" / "actor-sft"))
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--settings", default="4x16,8x32", help="CxK[@T][/R], ...; the first is the baseline")
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
    actions: dict[Setting, dict[str, list[str]]] = {}  # the last repeat's actions per task
    computed: dict[Setting, tuple[int, int]] = {}  # the last repeat's prompt tokens: computed, in all
    attempt = 0
    console = Console(width=200)
    for repeat in range(args.repeats):
        for setting in grid:
            attempt += 1
            elapsed, ids, (prompt, reused) = _child(args, setting, attempt)
            computed[setting] = (prompt - reused, prompt)
            seconds[setting].append(elapsed)
            actions[setting] = _actions(settings, ids)
            steps[setting] = sum(map(len, actions[setting].values()))
            console.print(f"repeat {repeat}: {_label(setting)}: {elapsed:.1f} s")
    base = sum(seconds[grid[0]]) / len(seconds[grid[0]])
    table = Table(title=f"evaluation of {args.tasks} test tasks ({Path(args.actor).name})")
    for column in ("concurrency", "chunk", "threads", "kept prompts", "mean s", "env steps", "s a step",
                   "prompt tokens computed", "same actions as first", "speed-up vs first"):
        table.add_column(column, justify="right")
    first = actions[grid[0]]
    for g in grid:
        mean = sum(seconds[g]) / len(seconds[g])
        same = sum(actions[g].get(task) == taken for task, taken in first.items())
        table.add_row(str(g[0]), str(g[1]), str(g[2] or "default"), str(g[3]) if g[3] >= 0 else "default",
                      f"{mean:.1f}", str(steps[g]), f"{mean / max(1, steps[g]):.2f}",
                      f"{computed[g][0]:,} of {computed[g][1]:,} ({computed[g][0] / max(1, computed[g][1]):.0%})",
                      f"{same}/{len(first)} tasks",
                      f"{base / mean:.2f}x")
    console.print(table)


def _actions(settings, trajectory_ids: list[int]) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """Each task's actions (the steps' raw responses), in order."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        rows = session.execute(select(m.Task.key, m.StepRow.response)
                               .join(m.TrajectoryRow, m.TrajectoryRow.task_id == m.Task.id)
                               .join(m.StepRow, m.StepRow.trajectory_id == m.TrajectoryRow.id)
                               .where(m.TrajectoryRow.id.in_(trajectory_ids))
                               .order_by(m.TrajectoryRow.id, m.StepRow.index)).all()
    out: dict[str, list[str]] = {}
    for task, response in rows:
        out.setdefault(task, []).append(response)
    return out


if __name__ == "__main__":
    main()
