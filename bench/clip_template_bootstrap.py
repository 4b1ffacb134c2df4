"""The shipped clip result (docs/runs/2026-11-29-phase-offline-clip/test_165.json) recomputed with templates:
success on the seen-template and held-out-template test tasks and the macro average over templates, and every
comparison's 95% interval as a bootstrap over templates rather than tasks (:mod:`webrl.method.template_split`).

The test tasks' templates come from the task suite, which is deterministic for its seed: it is loaded into a
temporary home (SQLite) and read back as the report reads it (:mod:`webrl.store.template_groups`).

    python bench/clip_template_bootstrap.py  # writes template_bootstrap.json beside test_165.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from webrl.method.template_split import TemplateGroups, group_comparison, group_success
from webrl.orchestration.suite_templates import suite_template_groups as suite_groups
from webrl.runs.report import template_comparison_lines

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "docs" / "runs" / "2026-11-29-phase-offline-clip" / "test_165.json"
#: (who, the solved set before, the solved set after) of each comparison, by the names in test_165.json.
COMPARISONS = (("clip-0.01+warmup against the SFT actor", "sft", "clip-0.01+warmup"),
               ("smooth-l1 against the SFT actor", "sft", "smooth-l1"),
               ("clip-0.01+warmup against smooth-l1", "smooth-l1", "clip-0.01+warmup"))

app = typer.Typer(add_completion=False)
console = Console()


def recompute(result: dict[str, Any], groups: TemplateGroups) -> dict[str, Any]:
    """Each setting's success by group and each comparison by group (JSON records)."""
    tasks = result["tasks"]
    solved = {"sft": result["sft_solved"], **{name: result[name]["solved"] for name in ("clip-0.01+warmup",
                                                                                      "smooth-l1")}}
    success = {name: group_success(tasks, groups, keys) for name, keys in solved.items()}
    out: dict[str, Any] = {"success": {name: {"overall": [g.overall.solved, g.overall.n],
                                              "seen": [g.seen.solved, g.seen.n],
                                              "held_out": [g.held_out.solved, g.held_out.n], "macro": g.macro,
                                              "templates": [g.templates, g.seen_templates, g.held_out_templates]}
                                       for name, g in success.items()}, "comparisons": {}}
    for who, before, after in COMPARISONS:
        compared = group_comparison(tasks, groups, solved[before], solved[after])
        out["comparisons"][who] = compared.as_dict()
        for line in template_comparison_lines(compared, who):
            console.print(line, markup=False, highlight=False)
        console.print()
    return out


@app.command()
def main(result: Path = typer.Option(RESULT, help="The clip run's per-task record."),
         seed: int = typer.Option(0, help="The task suite's seed (the run's)."),
         output: Path = typer.Option(None, help="Default: template_bootstrap.json beside --result.")) -> None:
    """Recompute the clip result by template group with template-cluster bootstrap intervals."""
    groups = suite_groups(seed)
    if not groups.covers(json.loads(result.read_text())["tasks"]):
        raise typer.BadParameter("a task of the result has no template in the suite", param_hint="--result")
    record = recompute(json.loads(result.read_text()), groups)
    record["source"] = result.name
    out = output or result.parent / "template_bootstrap.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    console.print(f"written: {out}")


if __name__ == "__main__":
    app()
