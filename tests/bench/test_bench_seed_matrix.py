"""bench/seed_matrix.py: settings of a stored phase's update over seeds, read from what the offline bench wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]
CLIP = ROOT / "docs" / "runs" / "2026-11-29-phase-offline-clip" / "test_165.json"


def _results(path: Path, tasks: list[str], baseline: list[str], rows: list[dict]) -> Path:
    path.write_text(json.dumps({"fixture": "phase1", "baseline_solved": baseline, "tasks": tasks, "results": rows}))
    return path


def test_a_bench_cell_is_the_start_actors_tasks_with_its_gains_and_without_its_losses(tmp_path: Path,
                                                                                      load_bench) -> None:
    matrix = load_bench("seed_matrix")
    tasks = ["t/1", "t/2", "t/3", "t/4"]
    path = _results(tmp_path / "results.json", tasks, ["t/1", "t/2"], [
        {"setting": "clip", "seed": 2, "solved": 2, "gained": ["t/3"], "lost": ["t/1"]},
        {"setting": "probe-only", "seed": 2}])  # not evaluated: not a cell
    cell = matrix.load_cell(*matrix.parse_cell(f"clip:2:{path}"))
    assert cell.solved == {"t/2", "t/3"} and cell.baseline == {"t/1", "t/2"} and cell.seed == 2
    with pytest.raises(typer.BadParameter, match="seed 2, not 1"):
        matrix.load_cell(*matrix.parse_cell(f"clip:1:{path}"))
    with pytest.raises(typer.BadParameter, match="0 evaluated rows named 'probe-only' of seed 2"):
        matrix.load_cell(*matrix.parse_cell(f"probe-only:2:{path}"))
    with pytest.raises(typer.BadParameter, match="not an integer"):
        matrix.parse_cell(f"clip:two:{path}")
    with pytest.raises(typer.BadParameter, match="SETTING:SEED:PATH"):
        matrix.parse_cell("clip")
    with pytest.raises(typer.BadParameter, match="is not a file"):
        matrix.load_cell("clip", 0, tmp_path / "missing.json", "clip")
    (tmp_path / "log.txt").write_text("update clip: 1/54\n")
    with pytest.raises(typer.BadParameter, match="is not JSON"):
        matrix.load_cell("clip", 0, tmp_path / "log.txt", "clip")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(typer.BadParameter, match="not a results record"):
        matrix.load_cell("clip", 0, tmp_path / "list.json", "clip")
    (tmp_path / "no-start.json").write_text(json.dumps({"tasks": tasks, "clip": {"solved": []}}))
    with pytest.raises(typer.BadParameter, match="start actor's solved tasks"):
        matrix.load_cell("clip", 0, tmp_path / "no-start.json", "clip")


def test_a_setting_is_checked_against_the_stored_record_before_anything_runs(load_bench) -> None:
    offline = load_bench("phase_offline")
    from webrl.method.hyperparams import DEFAULTS

    chosen = offline.checked_settings(DEFAULTS, ["clip:", "unclipped:actor.max_grad_norm=1.0,actor.warmup_steps=0"])
    assert chosen == {"clip": {}, "unclipped": {"actor.max_grad_norm": 1.0, "actor.warmup_steps": 0}}
    assert offline.checked_settings(DEFAULTS, None) == offline.DEFAULT_SETTINGS
    for texts, problem in ((["a:actor.lrr=1e-5"], "unknown hyperparameter 'actor.lrr'"),
                           (["a:actor.lr=-1"], "actor.lr"),
                           (["a:actor.lr=1e-5", "a:"], "given twice")):
        with pytest.raises(typer.BadParameter, match=problem):
            offline.checked_settings(DEFAULTS, texts)


def test_cells_must_share_their_tasks_and_start_actor(tmp_path: Path, load_bench) -> None:
    matrix = load_bench("seed_matrix")
    tasks = ["t/1", "t/2"]
    row = {"setting": "clip", "seed": 0, "solved": 1, "gained": [], "lost": []}
    a = matrix.load_cell("clip", 0, _results(tmp_path / "a.json", tasks, ["t/1"], [row]), "clip")
    other_start = matrix.load_cell("clip", 1, _results(tmp_path / "b.json", tasks, ["t/2"], [row | {"seed": 1}]),
                                   "clip")
    other_tasks = matrix.load_cell("clip", 1, _results(tmp_path / "c.json", ["t/1"], ["t/1"], [row | {"seed": 1}]),
                                   "clip")
    with pytest.raises(typer.BadParameter, match="another start actor"):
        matrix.check_comparable([a, other_start])
    with pytest.raises(typer.BadParameter, match="other tasks"):
        matrix.check_comparable([a, other_tasks])
    with pytest.raises(typer.BadParameter, match="given twice"):
        matrix.check_comparable([a, a])


def test_seeds_of_two_settings_against_the_start_actor_and_each_other(tmp_path: Path, load_bench) -> None:
    from webrl.method.template_split import TemplateGroups

    matrix = load_bench("seed_matrix")
    tasks = [f"t/{i}" for i in range(8)]
    groups = TemplateGroups({key: f"T{i // 2}" for i, key in enumerate(tasks)}, frozenset({"T0", "T1", "T2"}))
    start = ["t/0"]
    rows = [{"setting": "clip", "seed": s, "solved": 0, "gained": ["t/6", "t/7"] + (["t/2"] if s else []), "lost": []}
            for s in (0, 1)] + [{"setting": "plain", "seed": 0, "solved": 0, "gained": [], "lost": ["t/0"]}]
    path = _results(tmp_path / "results.json", tasks, start, rows)
    cells = [matrix.load_cell(s, seed, path, s) for s, seed in (("clip", 0), ("clip", 1), ("plain", 0))]
    lines, record = matrix.build(cells, groups)
    clip = record["comparisons"]["clip vs start actor"]["overall"]
    assert clip["difference"] == pytest.approx((2 + 0.5) / 8) and clip["per_seed_after"] == [3 / 8, 4 / 8]
    assert clip["gained_every_seed"] == ["t/6", "t/7"]  # t/2 in one seed of two
    assert record["comparisons"]["clip vs start actor"]["held_out"]["gained_every_seed"] == ["t/6", "t/7"]
    versus = record["comparisons"]["clip vs plain"]["overall"]
    assert versus["difference"] == pytest.approx((1 + 2 + 0.5) / 8) and versus["lost_every_seed"] == []
    assert any(line.startswith("| clip vs plain | 0, 1 vs 0 |") for line in lines)
    # T0 lost by plain; T3 (t/6, t/7) gained by both clip seeds; T1 (t/2) by clip seed 1
    assert [(m["template"], m["per_cell"], m["cells_below"]) for m in record["moved_templates"]] == [
        ("T0", [1, 1, 0], 1), ("T3", [2, 2, 0], 0), ("T1", [0, 1, 0], 0)]
    assert "| T0 (0, 1) | seen | 2 | 1 | 1 | 1 | 0 | 1 / 0 |" in lines
    assert matrix.task_numbers([f"s/test/{i}" for i in (147, 86, 9, 20)]) == "9, 20, 86 and 1 more"
    assert matrix.task_numbers([f"s/test/{i}" for i in (147, 86)]) == "86, 147"
    matrix.plot(cells, sorted(tasks), frozenset(start), groups, tmp_path / "matrix.png")
    assert (tmp_path / "matrix.png").stat().st_size > 0


def test_the_shipped_clip_result_as_two_one_seed_settings(load_bench) -> None:
    from webrl.orchestration.suite_templates import suite_template_groups

    matrix = load_bench("seed_matrix")
    cells = [matrix.load_cell("clip", 0, CLIP, "clip-0.01+warmup"), matrix.load_cell("unclipped", 0, CLIP, "smooth-l1")]
    _, record = matrix.build(cells, suite_template_groups(0))
    comparisons = record["comparisons"]

    def points(part: dict) -> list[float]:
        return [round(100 * part["difference"], 1), *(round(100 * x, 1) for x in part["interval"])]

    # docs/runs/2026-11-29-phase-offline-clip/README.md, "The same result with templates as the unit"
    assert points(comparisons["clip vs start actor"]["overall"]) == [13.3, -1.8, 35.3]
    assert points(comparisons["clip vs unclipped"]["overall"]) == [18.2, 3.8, 38.8]
    assert points(comparisons["clip vs unclipped"]["seen"]) == [14.1, 4.9, 24.5]
