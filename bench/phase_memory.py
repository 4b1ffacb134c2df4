"""What a phase's training leaves resident in the process that ran it, and what handing freed memory back returns.

The embedded pipeline trains each phase in its own process and then goes on to the next phase's rollouts and
evaluation there. This bench re-runs a stored phase's actor update (``services/trainer/offline.py``, the code a
phase runs) several times in one process and reads the kernel's count of the process's anonymous memory:

- ``fresh``: before the first update (torch and the data loaded);
- ``held``: after each update, its model dropped and garbage collected (what the process kept before the fix);
- ``returned``: after ``webrl.process_memory.return_freed_memory`` (glibc's ``malloc_trim(0)``), what a trainer
  phase now leaves.

The ratio held / returned is measured in the same run; ``returned`` growing from update to update would be
references kept across phases, which no trim can hand back.

    python bench/phase_memory.py --updates 2 --max-steps 24
    python bench/phase_memory.py --smoke            # the tiny actor, two steps: the path only
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from services.trainer.offline import load_phase, rerun_update
from webrl.config import get_settings
from webrl.process_memory import return_freed_memory, status_mb

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "bench" / "fixtures" / "phase1-smollm2"
SFT_ACTOR = ROOT / "webrl" / "assets" / "actor-sft-smollm2"
TINY_ACTOR = ROOT / "webrl" / "assets" / "actor-sft"

console = Console()


def anon_mb() -> float:
    value = status_mb("RssAnon")
    if value is None:
        raise typer.Exit("this bench reads /proc/self/status: it runs on Linux")
    return value


def main(fixture: Path = typer.Option(FIXTURE, help="A stored phase (bench/phase_offline.py export)."),
         actor: Path = typer.Option(SFT_ACTOR, help="The phase's start actor."),
         updates: int = typer.Option(2, min=1, help="Updates run one after another in this process."),
         max_steps: int = typer.Option(24, min=1, help="Trained steps per update (the stored phase's first ones)."),
         keep_activations: bool = typer.Option(True, help="Activations kept for the backward, as `make demo`'s "
                                               "preset trains (--no-keep-activations: recomputed, the default "
                                               "elsewhere)."),
         smoke: bool = typer.Option(False, help="The tiny actor, two steps, one epoch."),
         output: Path = typer.Option(Path(".webrl/bench/phase_memory"), help="Where results.json goes.")) -> None:
    """Run the stored phase's update ``--updates`` times and print the process's memory after each."""
    from webrl.commands import quiet_model_loading
    from webrl.method.hyperparams import with_overrides

    quiet_model_loading()
    settings = get_settings()
    try:
        stored = load_phase(fixture)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fixture") from None
    hp = with_overrides(stored.hyperparams, {"batching.gradient_checkpointing": not keep_activations})
    if smoke:
        actor, max_steps, hp = TINY_ACTOR, 2, with_overrides(hp, {"actor.epochs": 1})
    return_freed_memory()
    fresh = anon_mb()
    rows = []
    for i in range(1, updates + 1):
        result = rerun_update(settings, stored, actor, hp, max_steps=max_steps, seed=i)
        del result
        gc.collect()
        held = anon_mb()
        return_freed_memory()
        returned = anon_mb()
        rows.append({"update": i, "held_mb": round(held), "returned_mb": round(returned),
                     "peak_mb": round(status_mb("VmHWM") or 0)})
    table = Table(title=f"anonymous memory of this process (fresh: {fresh:,.0f} MiB), {max_steps} trained steps "
                  f"per update, {actor.name}, activations {'kept' if keep_activations else 'recomputed'}")
    for column in ("update", "held after gc (MiB)", "after return_freed_memory (MiB)", "held / returned",
                   "resident peak so far (MiB)"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(str(row["update"]), f"{row['held_mb']:,}", f"{row['returned_mb']:,}",
                      f"{row['held_mb'] / max(row['returned_mb'], 1):.2f}x", f"{row['peak_mb']:,}")
    console.print(table)
    growth = rows[-1]["returned_mb"] - rows[0]["returned_mb"]
    console.print(f"after trim, update {len(rows)} holds {growth:+,} MiB against update 1 "
                  "(kept references, if it grows with the updates)")
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps({"fresh_mb": round(fresh), "fixture": str(fixture.name),
                                                     "actor": actor.name, "max_steps": max_steps,
                                                     "keep_activations": keep_activations,
                                                     "updates": rows}, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
