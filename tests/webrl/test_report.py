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


def test_orm_column_measures_the_orm_or_says_none_judged() -> None:
    from webrl.report import NO_ORM

    evaluators = {**PHASE_1, "label.judge": "evaluators", "label.orm_accuracy": None}
    orm = {**PHASE_1, "label.judge": "orm:orm-sft-1234", "label.orm_accuracy": 0.75}
    seed = {**PHASE_0, "seed-rollout.judge": "evaluators", "seed-rollout.orm_accuracy": None}
    # phases recorded before stages named their judge: the run's --orm tells which (the evaluators read 100%)
    old_without_orm = {**PHASE_1, "run.orm": "", "label.orm_accuracy": 1.0}
    old_with_orm = {**PHASE_1, "run.orm": "/models/orm", "label.orm_accuracy": 0.8}
    header, body = phase_table([seed, evaluators, orm, old_without_orm, old_with_orm])
    column = [row[header.index("ORM acc.")] for row in body]
    assert column == [NO_ORM, NO_ORM, "75.0%", NO_ORM, "80.0%"]


def test_report_md_shows_no_orm_for_an_evaluator_rewarded_run(settings, tmp_path) -> None:
    from webrl.db import models as m
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope
    from webrl.report import NO_ORM, ORM_COLUMN_NOTE, phase_rows, write_report

    upgrade(settings)
    with session_scope(settings) as s:
        for name, orm in (("evaluators", ""), ("judged", "/models/orm")):
            run = m.Run(name=name, options={"orm": orm})
            s.add(run)
            s.flush()
            # as the pipeline stored it before naming the judge: the evaluators "agreed" with themselves
            s.add(m.Phase(run_id=run.id, index=0, status="done", metrics={**PHASE_0, "seed-rollout.orm_accuracy": 1.0}))
    text = write_report(settings, "evaluators", tmp_path / "a").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 0 |"))
    assert f"| {NO_ORM} |" in row and "100.0%" not in row and ORM_COLUMN_NOTE in text
    assert phase_table(phase_rows(settings, "judged"))[1][0][4] == "100.0%"


def test_every_phase_is_also_counted_on_the_subset_the_middle_phases_evaluate(settings, tmp_path) -> None:
    """Phase 0 and the last phase evaluate all test tasks, the phases between a fixed subset: the report counts
    each phase on that subset too, so the curve compares the same tasks."""
    from webrl.db import models as m
    from webrl.db.migrate import upgrade
    from webrl.db.repository import save_trajectory, upsert_task
    from webrl.db.session import session_scope
    from webrl.report import phase_rows, write_report
    from webrl.schemas import TaskConfig, Trajectory

    upgrade(settings)
    keys = [f"t/{i}" for i in range(8)]
    with session_scope(settings) as s:
        run = m.Run(name="r", options={"orm": ""})
        s.add(run)
        s.flush()
        tasks = {key: upsert_task(s, key, TaskConfig(task_id=key, sites=["shopping"], intent=f"do {key}",
                                                      start_url="__SHOPPING__/"), origin="seed", split="test")
                 for key in keys}
        for phase, evaluated in ((0, keys), (1, keys[:4]), (2, keys)):
            for key in evaluated:
                save_trajectory(s, tasks[key].id, phase, 0, Trajectory(task_id=key, intent=f"do {key}", steps=[]),
                                purpose="eval", run_id=run.id)
        for phase, solved, subset in ((0, ["t/0", "t/5", "t/6"], False), (1, ["t/0", "t/1"], True),
                                      (2, ["t/0", "t/1", "t/2", "t/7"], False)):
            s.add(m.Phase(run_id=run.id, index=phase, status="done", metrics={
                "evaluate.success": len(solved) / (4 if subset else 8), "evaluate.solved": solved,
                "evaluate.subset": subset}))
    rows = phase_rows(settings, "r")
    assert [r["evaluate.success_subset"] for r in rows] == [0.25, 0.5, 0.75]  # t/0..t/3 only
    header, body = phase_table(rows)
    assert [row[header.index("test subset")] for row in body] == ["25.0%", "50.0%", "75.0%"]
    assert [row[header.index("test overall")] for row in body] == ["37.5%", "50.0%", "50.0%"]
    text = write_report(settings, "r", tmp_path).read_text()
    assert "| test subset |" in text
    assert "| t/5 | do t/5 | solved | - |  |" in text  # phase 1 did not evaluate t/5; phase 2 did, and failed it
    assert "test subset" not in phase_table([PHASE_0, PHASE_1])[0]  # no subset evaluated: no column


def test_the_evaluation_note_says_how_many_tasks_each_phase_evaluated_and_which_came_later() -> None:
    from webrl.report import evaluation_note

    same = [{**PHASE_0, "evaluate.n": 165}, {**PHASE_1, "evaluate.n": 165}]
    assert evaluation_note(same) == ""  # nothing to explain
    mixed = [{**PHASE_0, "evaluate.n": 1}, {**PHASE_1, "evaluate.n": 165, "evaluate.later": True}]
    assert evaluation_note(mixed) == ("Test columns: success on the test tasks each phase evaluated (how many: "
                                      "phase 0: 1, phase 1: 165); evaluated after the run (`webrl eval --run`): "
                                      "phase 1.")
