"""Settings of one stored phase's update over several seeds each: every cell, every setting against the start actor,
and the settings against each other, with templates as the resampled unit.

Each cell is one adapter's greedy evaluation on the same test tasks, read from what ``bench/phase_offline.py run``
wrote (``results.json``: the start actor's solved tasks and each setting's gains and losses) or from a record of
solved sets (``{"tasks": [...], "sft_solved": [...], "<row>": {"solved": [...]}}``, as
docs/runs/2026-11-29-phase-offline-clip/test_165.json). A setting is compared as the mean over its seeds
(:mod:`webrl.method.seed_comparison`): seen-template and held-out-template tasks apart, each interval a bootstrap over
templates, and the tasks gained or lost in every seed.

    python bench/seed_matrix.py --output docs/runs/<date>-phase-offline-clip-seeds \\
        --cell "clip:0:docs/runs/2026-11-29-phase-offline-clip/test_165.json:clip-0.01+warmup" \\
        --cell "unclipped:0:docs/runs/2026-11-29-phase-offline-clip/test_165.json:smooth-l1" \\
        --cell "unclipped:1:.webrl/bench/phase_offline/unclipped-s1/results.json"

A cell is ``SETTING:SEED:PATH[:ROW]``: ROW names the setting inside the file (default: SETTING). Writes
``matrix.md`` (the tables), ``matrix.json`` and ``matrix.png`` under ``--output``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from webrl.method.seed_comparison import (
    SeedAveragedDifference,
    SeedComparison,
    compare_over_seeds,
    task_numbers,
    template_movements,
)
from webrl.method.template_split import TemplateGroups, group_comparison, group_success
from webrl.runs.report import group_cells

START = "start actor"

app = typer.Typer(add_completion=False)
console = Console()


@dataclass(frozen=True)
class Cell:
    """One setting's adapter under one seed: the tasks solved of the evaluated ``tasks``."""

    setting: str
    seed: int
    source: str
    tasks: tuple[str, ...]
    baseline: frozenset[str]  # the start actor's solved tasks as the file records them
    solved: frozenset[str]


def parse_cell(text: str) -> tuple[str, int, Path, str]:
    """``SETTING:SEED:PATH[:ROW]`` -> (setting, seed, path, row)."""
    parts = text.split(":")
    if len(parts) not in (3, 4) or not parts[0] or not parts[2]:
        raise typer.BadParameter(f"{text!r} is not SETTING:SEED:PATH[:ROW]", param_hint="--cell")
    try:
        seed = int(parts[1])
    except ValueError:
        raise typer.BadParameter(f"{text!r}: the seed {parts[1]!r} is not an integer", param_hint="--cell") from None
    return parts[0], seed, Path(parts[2]), parts[3] if len(parts) == 4 else parts[0]


def load_cell(setting: str, seed: int, path: Path, row: str) -> Cell:
    """The cell of ``row`` in ``path`` (a bench ``results.json`` or a record of solved sets)."""
    if not path.is_file():
        raise typer.BadParameter(f"{path} is not a file", param_hint="--cell")
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"{path} is not JSON ({exc})", param_hint="--cell") from None
    if not isinstance(record, dict):
        raise typer.BadParameter(f"{path} is not a results record (a JSON object)", param_hint="--cell")
    tasks = tuple(record.get("tasks") or ())
    if not tasks:
        raise typer.BadParameter(f"{path} names no evaluated tasks", param_hint="--cell")
    start = "baseline_solved" if "results" in record else "sft_solved"
    if start not in record:
        raise typer.BadParameter(f"{path} does not record the start actor's solved tasks ({start})",
                                 param_hint="--cell")
    if "results" in record:  # bench/phase_offline.py's results.json
        baseline = frozenset(record["baseline_solved"])
        named = [r for r in record["results"] if r.get("setting") == row and "solved" in r]
        rows = [r for r in named if int(r.get("seed", 0)) == seed]
        if not rows and named:
            ran = ", ".join(str(r.get("seed", 0)) for r in named)
            raise typer.BadParameter(f"{path}: {row!r} ran under seed {ran}, not {seed}", param_hint="--cell")
        if len(rows) != 1:
            raise typer.BadParameter(f"{path} holds {len(rows)} evaluated rows named {row!r} of seed {seed}",
                                     param_hint="--cell")
        solved = (baseline - set(rows[0]["lost"])) | set(rows[0]["gained"])
    else:  # {"tasks", "sft_solved", row: {"solved"}}
        if row not in record or "solved" not in record[row]:
            raise typer.BadParameter(f"{path} has no solved set named {row!r}", param_hint="--cell")
        baseline, solved = frozenset(record["sft_solved"]), set(record[row]["solved"])
    return Cell(setting, seed, str(path), tasks, baseline, frozenset(solved) & frozenset(tasks))


def check_comparable(cells: list[Cell]) -> tuple[list[str], frozenset[str]]:
    """(the tasks, the start actor's solved set) every cell shares; a clear error naming the cell that differs."""
    first = cells[0]
    for cell in cells[1:]:
        if set(cell.tasks) != set(first.tasks):
            raise typer.BadParameter(f"{cell.setting} seed {cell.seed} ({cell.source}) evaluated other tasks than "
                                     f"{first.setting} seed {first.seed}", param_hint="--cell")
        if cell.baseline != first.baseline:
            raise typer.BadParameter(f"{cell.setting} seed {cell.seed} ({cell.source}) starts from another start "
                                     f"actor's result than {first.setting} seed {first.seed}", param_hint="--cell")
    seen: set[tuple[str, int]] = set()
    for cell in cells:
        if (cell.setting, cell.seed) in seen:
            raise typer.BadParameter(f"{cell.setting} seed {cell.seed} is given twice", param_hint="--cell")
        seen.add((cell.setting, cell.seed))
    return sorted(first.tasks), first.baseline


def points(difference: float, interval: tuple[float, float]) -> str:
    return f"{100 * difference:+.1f} ({100 * interval[0]:+.1f} .. {100 * interval[1]:+.1f})"


def cell_table(cells: list[Cell], tasks: list[str], baseline: frozenset[str], groups: TemplateGroups) -> list[str]:
    lines = ["| setting | seed | solved | seen templates | held-out templates | macro | vs start, points (95% over "
             "templates) | seen gained / lost |", "|---|---|---|---|---|---|---|---|"]
    def success(solved: frozenset[str]) -> str:  # all tasks, seen, held-out, macro: the run report's cells
        overall, _templates, seen, held_out, macro = group_cells(group_success(tasks, groups, solved))
        return f"{overall} | {seen} | {held_out} | {macro}"

    lines.append(f"| {START} | - | {success(baseline)} | - | - |")
    for cell in cells:
        compared = group_comparison(tasks, groups, baseline, cell.solved)
        seen = compared.seen
        lines.append(f"| {cell.setting} | {cell.seed} | {success(cell.solved)} | "
                     f"{points(compared.overall.difference, compared.overall.interval)} | "
                     f"{f'{len(seen.gained)} / {len(seen.lost)}' if seen else '-'} |")
    return lines


def difference_cells(part: SeedAveragedDifference | None) -> str:
    if part is None:
        return "- | -"
    return (f"{points(part.difference, part.interval)} | "
            f"{len(part.gained_every_seed)} / {len(part.lost_every_seed)}")


def comparison_rows(name: str, seeds: str, compared: SeedComparison) -> str:
    overall = compared.overall
    per_seed = ", ".join(f"{100 * r:.1f}" for r in overall.per_seed_after)
    return (f"| {name} | {seeds} | {100 * overall.after:.1f}% ({per_seed}) | {difference_cells(overall)} | "
            f"{difference_cells(compared.seen)} | {difference_cells(compared.held_out)} |")


def seed_list(cells: list[Cell]) -> str:
    return ", ".join(str(c.seed) for c in cells)


COMPARISON_HEADER = ["| comparison | seeds | mean success (each seed) | overall, points (95% over templates) | "
                     "gained / lost in every seed | seen, points | seen gained / lost in every seed | held-out, "
                     "points | held-out gained / lost in every seed |", "|---|---|---|---|---|---|---|---|---|"]


def movement_table(cells: list[Cell], tasks: list[str], baseline: frozenset[str],
                   groups: TemplateGroups) -> tuple[list[str], list[dict[str, Any]]]:
    """The templates some cell moved: their solved tasks under the start actor and under every cell."""
    moved = template_movements(tasks, groups, baseline, [c.solved for c in cells])
    names = " | ".join(f"{c.setting} {c.seed}" for c in cells)
    lines = [f"| template | group | tasks | {START} | {names} | cells below / above |",
             "|" + "---|" * (5 + len(cells))]
    for m in moved:
        lines.append(f"| {m.template} ({task_numbers(m.tasks)}) | "
                     f"{m.group} | {len(m.tasks)} | {m.start} | {' | '.join(map(str, m.per_cell))} | "
                     f"{m.cells_below} / {m.cells_above} |")
    return lines, [m.as_dict() for m in moved]


def build(cells: list[Cell], groups: TemplateGroups) -> tuple[list[str], dict[str, Any]]:
    """The markdown tables and the JSON record of the matrix."""
    tasks, baseline = check_comparable(cells)
    if not groups.covers(tasks):
        raise typer.BadParameter("a task of the cells has no template in the suite", param_hint="--cell")
    by_setting: dict[str, list[Cell]] = {}
    for cell in sorted(cells, key=lambda c: (c.setting, c.seed)):
        by_setting.setdefault(cell.setting, []).append(cell)
    ordered = [c for group in by_setting.values() for c in group]  # by setting, then seed: every table's order
    lines = ["## Every cell", "", *cell_table(ordered, tasks, baseline, groups), ""]
    record: dict[str, Any] = {"tasks": tasks, "start_solved": sorted(baseline),
                              "cells": [{"setting": c.setting, "seed": c.seed, "source": c.source,
                                         "solved": sorted(c.solved)} for c in cells], "comparisons": {}}
    lines += ["## Each setting over its seeds against the start actor", "", *COMPARISON_HEADER]
    for setting, group in by_setting.items():
        compared = compare_over_seeds(tasks, groups, [baseline], [c.solved for c in group])
        name = f"{setting} vs {START}"
        record["comparisons"][name] = compared.as_dict()
        lines.append(comparison_rows(name, seed_list(group), compared))
    lines += ["", "## The settings against each other, over their seeds", "", *COMPARISON_HEADER]
    for (first, after), (second, before) in itertools.combinations(by_setting.items(), 2):
        compared = compare_over_seeds(tasks, groups, [c.solved for c in before], [c.solved for c in after])
        name = f"{first} vs {second}"
        record["comparisons"][name] = compared.as_dict()
        lines.append(comparison_rows(name, f"{seed_list(after)} vs {seed_list(before)}", compared))
    lines += ["", "Gained / lost in every seed: tasks no seed of the second solved and every seed of the first did "
              "(and the reverse); the start actor is one evaluation. Each interval resamples the templates, a "
              "template drawn with all its tasks, of the seed-averaged per-task differences (10,000 resamples)."]
    table, record["moved_templates"] = movement_table(ordered, tasks, baseline, groups)
    lines += ["", "## Templates that moved, cell by cell", "",
              "Tasks solved of each template on which some cell differs from the start actor (its tasks' numbers "
              "in brackets), the templates most often below the start actor first.", "", *table]
    return lines, record


def plot(cells: list[Cell], tasks: list[str], baseline: frozenset[str], groups: TemplateGroups, path: Path) -> None:
    """Success per seed of each setting, overall and by template group, with the start actor's as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({c.setting for c in cells})
    start = group_success(tasks, groups, baseline)
    panels = (("overall", lambda g: g.overall.rate), ("seen templates", lambda g: g.seen.rate),
              ("held-out templates", lambda g: g.held_out.rate))
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), sharey=True)
    for ax, (title, rate) in zip(axes, panels, strict=True):
        for x, setting in enumerate(settings):
            group = [c for c in cells if c.setting == setting]
            values = [100 * (rate(group_success(tasks, groups, c.solved)) or 0.0) for c in group]
            xs = [x + 0.12 * (i - (len(group) - 1) / 2) for i in range(len(group))]  # seeds side by side
            ax.scatter(xs, values, s=50, zorder=3, color=f"C{x}")
            for c, xi, v in zip(group, xs, values, strict=True):  # each seed's number right above its own point
                ax.annotate(str(c.seed), (xi, v), textcoords="offset points", xytext=(0, 5), ha="center",
                            fontsize=7)
        ax.axhline(100 * (rate(start) or 0.0), color="gray", linestyle="--", label=START)
        ax.set_xticks(range(len(settings)), settings, rotation=20)
        ax.set_xlim(-0.5, len(settings) - 0.3)
        ax.set_title(title)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("test tasks solved (%)")
    fig.supxlabel("each point one seed, labelled with its number", fontsize=8)
    axes[0].legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@app.command()
def main(cell_args: list[str] = typer.Option(..., "--cell", help="SETTING:SEED:PATH[:ROW] (repeat)."),
         output: Path = typer.Option(Path(".webrl/bench/seed_matrix"), help="Where matrix.md/.json/.png go."),
         suite_seed: int = typer.Option(0, help="The task suite's seed (the runs')."),
         plot_figure: bool = typer.Option(True, "--plot/--no-plot", help="Also write matrix.png.")) -> None:
    """Tabulate settings over seeds against the start actor and against each other."""
    from webrl.orchestration.suite_templates import suite_template_groups

    cells = [load_cell(*parse_cell(text)) for text in cell_args]
    groups = suite_template_groups(suite_seed)
    lines, record = build(cells, groups)
    output.mkdir(parents=True, exist_ok=True)
    (output / "matrix.md").write_text("\n".join(lines) + "\n")
    (output / "matrix.json").write_text(json.dumps(record, indent=1) + "\n")
    if plot_figure:
        plot(cells, record["tasks"], frozenset(record["start_solved"]), groups, output / "matrix.png")
    typer.echo("\n".join(lines))
    console.print(f"written: {output / 'matrix.md'}, matrix.json{', matrix.png' if plot_figure else ''}")


if __name__ == "__main__":
    app()
