"""The run report's phase table: one row per phase, the numbers each stage recorded, and its wall time."""

from __future__ import annotations

from webrl.report import phase_seconds, phase_table

PHASE_0 = {"phase": 0, "status": "done", "evaluate.success": 0.05, "evaluate.seconds": 90.0,
           "seed-rollout.rollouts": 48, "seed-rollout.reward_rate": 0.125, "seed-rollout.seconds": 30.0}
PHASE_1 = {"phase": 1, "status": "done", "generate.generated": 96, "generate.seconds": 1.5, "filter.kept": 48,
           "filter.seconds": 20.0, "rollout.rollouts": 48, "rollout.seconds": 40.5, "label.reward_rate": 0.25,
           "label.orm_accuracy": 0.9, "label.seconds": 0.5, "train.actor_loss": 0.31, "train.seconds": 37.5,
           "evaluate.success": 0.15, "evaluate.success_reddit": 0.2, "evaluate.seconds": 100.0}


def test_phase_seconds_adds_up_the_stages() -> None:
    assert phase_seconds(PHASE_0) == 120.0
    assert phase_seconds(PHASE_1) == 200.0
    assert phase_seconds({"phase": 2, "status": "running"}) == 0.0


def test_phase_table_rows() -> None:
    header, body = phase_table([PHASE_0, PHASE_1])
    rows = [dict(zip(header, row, strict=True)) for row in body]
    assert rows[0]["rollouts"] == "48" and rows[0]["reward rate"] == "12.5%" and rows[0]["generated"] == "-"
    assert rows[0]["test overall"] == "5.0%" and rows[0]["minutes"] == "2"
    assert rows[1]["kept"] == "48" and rows[1]["ORM acc."] == "90.0%" and rows[1]["test reddit"] == "20.0%"
    assert rows[1]["test overall"] == "15.0%" and rows[1]["actor loss"] == "0.31" and rows[1]["minutes"] == "3.3"


def test_solved_table_marks_each_phase_and_orders_tasks_by_the_first_phase_that_solved_them() -> None:
    from webrl.report import markdown_table, solved_table

    rows = [{**PHASE_0, "evaluate.solved": ["t/b"]}, {"phase": 1, "status": "running"},
            {**PHASE_1, "phase": 2, "evaluate.solved": ["t/a", "t/b"]}]
    header, body = solved_table(rows, {"t/a": "Count the | pipes", "t/b": "Open the forum"})
    assert header == ["task", "intent", "phase 0", "phase 2"]  # phase 1 was not evaluated yet
    assert body == [["t/b", "Open the forum", "solved", "solved"], ["t/a", "Count the | pipes", "", "solved"]]
    assert "Count the \\| pipes" in markdown_table(header, body)  # a | in an intent does not split the cell
    assert solved_table([PHASE_0], {}) == (["task", "intent"], [])  # runs from before the metric existed
