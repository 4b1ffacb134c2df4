"""Time each stage of one WebRL phase (the smoke preset, tiny model, embedded mode), and the rollout stage
against the same tasks rolled out by the oracle policy in the same run (the environment's floor: what the
rollout costs without model inference).

    .venv/bin/python bench/phase.py [--actor PATH] [--preset smoke]

Without ``--actor`` a test-size actor is bootstrapped first (oracle demos, a short SFT), in a temporary home.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from isolated_home import isolated_home  # bench/isolated_home.py (this folder is on sys.path when run as a script)
from rich.console import Console
from rich.table import Table

console = Console()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--actor", type=Path, help="SFT actor folder (default: bootstrap a test-size one)")
    parser.add_argument("--preset", default="smoke")
    args = parser.parse_args()

    isolated_home("webrl-bench-phase-")
    from webrl.config import get_settings
    from webrl.db.migrate import upgrade
    from webrl.method.hyperparams import with_overrides
    from webrl.method.presets import PRESETS
    from webrl.orchestration.bootstrap import BootstrapConfig, run_bootstrap
    from webrl.orchestration.pipeline import Pipeline, PipelineOptions, StageReport
    from webrl.sandbox.server import running_sandbox, sandbox_ports
    from webrl.sandbox.tasks.suite import load_suite
    from webrl.wire.clients import rollout_run
    from webrl.wire.contracts import OracleSpec, RolloutRequest

    settings = get_settings()
    upgrade(settings)
    load_suite(settings, settings.seed)
    actor = args.actor
    if actor is None:
        console.print("bootstrapping a test-size actor ...")
        actor = Path(run_bootstrap(settings, BootstrapConfig(size="test", vocab_size=1024, demos_per_template=1,
                                                             max_demos=6, sft_minutes=0.5, concurrency=2)).path)
    hyperparams = with_overrides(PRESETS[args.preset], {"curriculum.phases": 1})
    options = PipelineOptions(run="bench", actor=str(actor), orm=str(actor), hyperparams=hyperparams)
    marks: list[tuple[int, str, float]] = []
    clock = time.perf_counter()

    def on_stage(report: StageReport) -> None:
        nonlocal clock
        now = time.perf_counter()
        marks.append((report.phase, report.stage, now - clock))
        clock = now

    with running_sandbox(settings, ports=sandbox_ports(settings)):
        pipeline = Pipeline(settings, options, on_stage=on_stage)
        clock = time.perf_counter()
        pipeline.run()
        kept = pipeline.phase_state(1).kept_keys
        start = time.perf_counter()
        rollout_run(RolloutRequest(task_keys=kept, phase=99, attempt=0, purpose="eval", policy=OracleSpec(),
                                   concurrency=hyperparams.rollout.concurrency,
                                   max_steps=hyperparams.rollout.max_steps))
        oracle_s = time.perf_counter() - start

    table = Table(title=f"one phase, preset {args.preset}, {len(kept)} tasks kept")
    for column in ("phase", "stage", "seconds", "share of its phase"):
        table.add_column(column, justify="right")
    totals: dict[int, float] = {}
    for phase, _, seconds in marks:
        totals[phase] = totals.get(phase, 0.0) + seconds
    for phase, stage, seconds in marks:
        table.add_row(str(phase), stage, f"{seconds:.1f}", f"{100 * seconds / totals[phase]:.0f}%")
    console.print(table)
    rollout_s = next(s for p, stage, s in marks if p == 1 and stage == "rollout")
    console.print(f"rollout with the actor: {rollout_s:.1f} s; same tasks with the oracle policy: {oracle_s:.1f} s; "
                  f"ratio {rollout_s / max(oracle_s, 1e-9):.2f}x (model inference and longer failed episodes)")


if __name__ == "__main__":
    main()
