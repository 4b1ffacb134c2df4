"""The run report's phase table: one row per phase, the numbers each stage recorded, and its wall time."""

from __future__ import annotations

from webrl.runs.report import phase_seconds, phase_table

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
    from webrl.runs.report import markdown_table, solved_table

    rows = [{**PHASE_0, "evaluate.solved": ["t/b"]}, {"phase": 1, "status": "running"},
            {**PHASE_1, "phase": 2, "evaluate.solved": ["t/a", "t/b"]}]
    header, body = solved_table(rows, {"t/a": "Count the | pipes", "t/b": "Open the forum"})
    assert header == ["task", "intent", "phase 0", "phase 2"]  # phase 1 was not evaluated yet
    assert body == [["t/b", "Open the forum", "solved", "solved"], ["t/a", "Count the | pipes", "", "solved"]]
    assert "Count the \\| pipes" in markdown_table(header, body)  # a | in an intent does not split the cell
    assert solved_table([PHASE_0], {}) == (["task", "intent"], [])  # runs from before the metric existed


def test_orm_column_measures_the_orm_or_says_none_judged() -> None:
    from webrl.runs.report import NO_ORM

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
    from webrl.runs.report import NO_ORM, ORM_COLUMN_NOTE, phase_rows, write_report

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


def test_the_orm_calibration_is_the_runs_own(settings) -> None:
    """A run rewarded by the evaluators gets no calibration plot because another run (or train-orm) in the same home
    had an ORM judge; a judged run's plot holds its own trajectories alone."""
    from webrl.agent.schemas import Observation, TaskConfig, Trajectory
    from webrl.db import models as m
    from webrl.db import repository as repo
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope
    from webrl.runs.report import calibration_points

    upgrade(settings)
    task = TaskConfig.from_json({"task_id": 1, "sites": ["shopping"], "intent": "Find the price", "start_url": "x",
                                 "eval": {"eval_types": ["string_match"], "reference_answers": {"exact_match": "$3"}}})
    with session_scope(settings) as s:
        row = repo.upsert_task(s, "t/1", task, origin="seed", split="train")
        runs = {name: m.Run(name=name, options={}) for name in ("evaluators", "judged")}
        s.add_all(runs.values())
        s.flush()
        for attempt, (run, p_yes) in enumerate([("judged", 0.9), ("evaluators", None), ("", 0.2)]):
            traj = Trajectory(task_id="t/1", intent="Find the price", env_score=1.0,
                              last_observation=Observation(html="<p>$3</p>", url="http://s/"))
            run_id = runs[run].id if run else m.NO_RUN  # "": a train-orm trajectory of no run
            stored = repo.save_trajectory(s, row.id, 1, attempt, traj, run_id=run_id)
            if p_yes is not None:
                repo.save_label(s, stored.id, "orm-v1", p_yes=p_yes, threshold=0.5)
    assert calibration_points(settings, "judged") == [(0.9, 1.0)]
    assert calibration_points(settings, "evaluators") == []
    assert calibration_points(settings, "no-such-run") == []


def test_every_phase_is_also_counted_on_the_subset_the_middle_phases_evaluate(settings, tmp_path, capsys) -> None:
    """Phase 0 and the last phase evaluate all test tasks, the phases between a fixed subset: the report counts
    each phase on that subset too, so the curve compares the same tasks."""
    from webrl.agent.schemas import TaskConfig, Trajectory
    from webrl.db import models as m
    from webrl.db.migrate import upgrade
    from webrl.db.repository import save_trajectory, upsert_task
    from webrl.db.session import session_scope
    from webrl.runs.report import phase_rows, write_report

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
    # recorded before the evaluate stage named its tasks: they are read from the phase's evaluation episodes
    assert [len(r["evaluate.keys"]) for r in rows] == [8, 4, 8]
    text = write_report(settings, "r", tmp_path).read_text()
    assert "| test subset |" in text
    assert "| t/5 | do t/5 | solved | - |  |" in text  # phase 1 did not evaluate t/5; phase 2 did, and failed it
    assert "test subset" not in phase_table([PHASE_0, PHASE_1])[0]  # no subset evaluated: no column
    assert "## Last phase against the SFT actor, on the same tasks" in text
    assert "on the 8 test tasks both evaluated: solved 3 -> 4 (37.5% -> 50.0%), +12.5 points." in text
    assert "Gained (3): t/1, t/2, t/7." in text and "Lost (2): t/5, t/6." in text

    from webrl.commands.train import print_phase_table

    capsys.readouterr()
    print_phase_table(settings, "r")
    shown = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "solved 3 -> 4 (37.5% -> 50.0%), +12.5 points." in shown and "Lost (2): t/5, t/6." in shown


def test_the_evaluation_note_says_how_many_tasks_each_phase_evaluated_and_which_came_later() -> None:
    from webrl.runs.report import evaluation_note

    same = [{**PHASE_0, "evaluate.n": 165}, {**PHASE_1, "evaluate.n": 165}]
    assert evaluation_note(same) == ""  # nothing to explain
    mixed = [{**PHASE_0, "evaluate.n": 1}, {**PHASE_1, "evaluate.n": 165, "evaluate.later": True}]
    assert evaluation_note(mixed) == ("Test columns: success on the test tasks each phase evaluated (how many: "
                                      "phase 0: 1, phase 1: 165); evaluated after the run (`webrl eval --run`): "
                                      "phase 1.")


def test_the_actor_columns_show_the_exact_kl_k1_flips_and_positives_from_failed_runs() -> None:
    new = {**PHASE_1, "train.kl_exact": 0.0123, "train.log_ratio_k1": -0.004, "train.flips": 0.25,
           "train.positives_from_failed": 0.5, "train.flips_reddit": 1, "train.flips_gitlab": 0.0}
    old = {**PHASE_1, "phase": 2, "train.kl": 0.009}  # recorded before the exact KL: its k1 estimate was "kl"
    header, body = phase_table([PHASE_0, new, old])
    rows = [dict(zip(header, row, strict=True)) for row in body]
    assert "KL" not in header
    assert [(r["KL exact"], r["k1"], r["flips"], r["pos. from failed"]) for r in rows] == [
        ("-", "-", "-", "-"), ("0.0123", "-0.004", "25.0%", "50.0%"), ("-", "0.009", "-", "-")]
    skipped = {**PHASE_1, "phase": 3, "train.positive_steps": 6, "train.replayed_positive_steps": 6,
               "train.actor_skipped": 1}
    trained = {**PHASE_1, "phase": 4, "train.positive_steps": 19, "train.replayed_positive_steps": 8,
               "train.actor_skipped": 0}
    header, body = phase_table([PHASE_0, skipped, trained, {**PHASE_1, "train.positive_steps": 4}])
    assert [dict(zip(header, row, strict=True))["A > 0 steps"] for row in body] == [
        "-", "6 (6 replayed), actor kept", "19 (8 replayed)", "4"]
    refused = {**PHASE_1, "train.positive_steps": 13, "validate.accepted": False, "validate.lost": 8,
               "validate.gained": 2, "validate.tasks": 40}
    header, body = phase_table([refused, {**refused, "validate.margin": 2, "validate.refused_by": "margin"}])
    assert [dict(zip(header, row, strict=True))["A > 0 steps"] for row in body] == [
        "13, update refused (validation: 8 lost, 2 gained of 40)",
        "13, update refused (validation: 8 lost, 2 gained of 40; net loss above the margin of 2)"]
    retried = {**PHASE_1, "rollout.rollouts": 46, "rollout.attempts": 2}
    header, body = phase_table([{**PHASE_1, "rollout.rollouts": 24, "rollout.attempts": 1}, retried])
    assert [dict(zip(header, row, strict=True))["rollouts"] for row in body] == ["24", "46 (2 attempts)"]

    from webrl.runs.report import flips_table

    flips_header, flips_body = flips_table([PHASE_0, new, old])
    assert flips_header == ["phase", "flips", "flips shopping", "flips shopping_admin", "flips reddit", "flips gitlab"]
    assert flips_body == [["1", "25.0%", "-", "-", "100.0%", "0.0%"]]  # only the phase that measured flips


def _keys(n: int) -> list[str]:
    return [f"t/{i}" for i in range(n)]


#: Phase 0 and the last evaluate all 8 tasks, phases 1 and 2 the fixed sample t/0..t/3; phase 1 was evaluated again
#: later on the first 6 (``webrl eval --run --limit 6``), which holds the sample.
SAMPLED = [
    {"phase": 0, "evaluate.success": 3 / 8, "evaluate.solved": ["t/0", "t/5", "t/6"], "evaluate.keys": _keys(8),
     "evaluate.sample": _keys(4), "evaluate.subset": False, "evaluate.success_reddit": 0.5},
    {"phase": 1, "evaluate.success": 2 / 6, "evaluate.solved": ["t/0", "t/1"], "evaluate.keys": _keys(6),
     "evaluate.sample": _keys(4), "evaluate.subset": False, "evaluate.later": True},
    {"phase": 2, "evaluate.success": 3 / 4, "evaluate.solved": ["t/0", "t/1", "t/2"], "evaluate.keys": _keys(4),
     "evaluate.sample": _keys(4), "evaluate.subset": True},
    {"phase": 3, "evaluate.success": 4 / 8, "evaluate.solved": ["t/0", "t/1", "t/2", "t/7"], "evaluate.keys": _keys(8),
     "evaluate.sample": _keys(4), "evaluate.subset": False, "evaluate.success_reddit": 0.25},
]


def _sampled_rows() -> list[dict]:
    from webrl.runs.report import add_subset_success, subset_keys

    rows = [dict(r) for r in SAMPLED]
    add_subset_success(rows, subset_keys(rows))
    return rows


def test_success_series_joins_only_phases_scored_on_the_same_tasks() -> None:
    from webrl.runs.report import success_series

    phases, series = success_series(_sampled_rows())
    assert phases == [0, 1, 2, 3]
    by_label = {s.label: (s.style, s.values) for s in series}
    assert by_label["fixed sample, 4 tasks"] == ("sample", [0.25, 0.5, 0.75, 0.75])  # every phase on t/0..t/3
    assert by_label["overall, 8 tasks"] == ("overall", [3 / 8, None, None, 0.5])  # the start and the end only
    assert by_label["reddit (of the 8)"] == ("site", [0.5, None, None, 0.25])
    assert by_label["overall, 6 other tasks"] == ("other", [None, 2 / 6, None, None])
    assert not any(label.startswith("overall, 4") for label in by_label)  # phase 2's own tasks: the sample line

    every = [{**r, "evaluate.keys": _keys(8), "evaluate.subset": False} for r in SAMPLED]
    for r in every:
        r.pop("evaluate.sample")
    _, series = success_series(every)
    assert [s.label for s in series if s.style != "site"] == ["overall, 8 tasks"]  # one line through every phase
    assert series[0].values == [3 / 8, 2 / 6, 3 / 4, 4 / 8]
    _, unknown = success_series([{k: v for k, v in r.items() if k != "evaluate.keys"} for r in every])
    assert all(sum(v is not None for v in s.values) <= 1 for s in unknown)  # tasks unknown: nothing is joined


def test_the_plot_draws_no_line_between_phases_scored_on_different_tasks(tmp_path) -> None:
    import itertools
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from webrl.runs.report import draw_success, plot_success, subset_keys

    rows = _sampled_rows()
    tasks = {r["phase"]: set(r["evaluate.keys"]) for r in rows}
    sample = subset_keys(rows)
    fig, ax = plt.subplots()
    draw_success(ax, rows)
    segments = []
    for line in ax.get_lines():
        points = list(zip(line.get_xdata(), line.get_ydata(), strict=True))
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if line.get_linestyle() != "None" and not (math.isnan(y0) or math.isnan(y1)):
                segments.append((line.get_label(), x0, x1))
    plt.close(fig)
    for label, x0, x1 in segments:
        if label.startswith("fixed sample"):
            assert sample <= tasks[x0] and sample <= tasks[x1]
        else:
            assert tasks[x0] == tasks[x1], (label, x0, x1)
    assert ("fixed sample, 4 tasks", 0, 1) in segments
    assert [s[1:] for s in segments if s[0] == "overall, 8 tasks"] == [(0, 3)]  # over the phases of the sample
    assert plot_success(rows, tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_last_phase_against_the_sft_actor_on_the_tasks_both_evaluated() -> None:
    from webrl.runs.report import comparison_lines, last_against_sft

    rows = _sampled_rows()
    last, comparison = last_against_sft(rows)  # type: ignore[misc]
    assert last == 3 and comparison.n == 8 and (comparison.gained, comparison.lost) == (["t/1", "t/2", "t/7"],
                                                                                         ["t/5", "t/6"])
    lines = comparison_lines(rows)
    assert lines[0] == ("Phase 3 against phase 0 (the SFT actor) on the 8 test tasks both evaluated: solved 3 -> 4 "
                        "(37.5% -> 50.0%), +12.5 points.")
    assert "McNemar's exact test: p = 1 (3 gained, 2 lost)" in lines[1]  # 2 * P(Bin(5, 1/2) <= 2) = 1
    assert lines[2:] == ["Gained (3): t/1, t/2, t/7.", "Lost (2): t/5, t/6."]
    middle = last_against_sft(rows[:3])  # phase 2 (the sample) is the last evaluated: compared on the sample
    assert middle is not None and middle[0] == 2 and middle[1].n == 4 and middle[1].gained == ["t/1", "t/2"]
    assert comparison_lines(rows[:1]) == []  # only the SFT actor: nothing to compare


def test_the_phase_table_gives_the_minutes_of_rollout_train_evaluate_and_the_rest() -> None:
    phase_2 = {"phase": 2, "status": "done", "generate.seconds": 30, "filter.seconds": 24.0, "rollout.seconds": 120.0,
               "label.seconds": 6.0, "train.seconds": 300.0, "evaluate.seconds": 60.0}
    header, body = phase_table([PHASE_0, phase_2, {"phase": 3, "status": "running", "generate.seconds": 3.0}])
    columns = ["min rollout", "min train", "min eval", "min other", "minutes"]
    assert header[-5:] == columns
    rows = [[dict(zip(header, row, strict=True))[c] for c in columns] for row in body]
    assert rows[0] == ["0.5", "-", "1.5", "0", "2"]  # phase 0: seed rollout 30 s, evaluate 90 s
    assert rows[1] == ["2", "5", "1", "1", "9"]  # generate + filter + label: 60 s
    assert rows[2] == ["-", "-", "-", "0.1", "0.1"]  # a phase still running: only what it finished


def test_the_report_names_the_machine() -> None:
    from webrl.runs.report import machine_line

    line = machine_line()
    assert line.startswith("Machine: ") and line.endswith(" cores")
    assert line.split(", ")[-1].split()[0].isdigit() and line != "Machine: , 1 cores"


def _held_out_flip_rows() -> list[dict]:
    """Phase 0 and 1 on 4 held-out tasks of template h (all flip 0 -> 1) and 6 seen tasks of templates s0-s2
    (phase 0 solves s/0 and s/1, both of template s0; phase 1 loses s/1)."""
    templates = {**{f"s/{i}": f"s{i // 2}" for i in range(6)}, **{f"h/{i}": "h" for i in range(4)}}
    keys = sorted(templates)
    common = {"evaluate.keys": keys, "evaluate.templates": templates, "evaluate.seen_templates": ["s0", "s1", "s2"]}
    return [{"phase": 0, **common, "evaluate.solved": ["s/0", "s/1"]},
            {"phase": 1, **common, "evaluate.solved": ["s/0", "h/0", "h/1", "h/2", "h/3"]}]


def test_with_templates_known_every_interval_resamples_templates() -> None:
    from webrl.method.paired_stats import RESAMPLES
    from webrl.runs.report import comparison_lines, last_against_sft

    rows = _held_out_flip_rows()
    last, c = last_against_sft(rows)  # type: ignore[misc]
    assert (last, c.unit, c.templates) == (1, "template", 4)
    lines = comparison_lines(rows)
    assert lines[0] == ("Phase 1 against phase 0 (the SFT actor) on the 10 test tasks both evaluated: solved 2 -> 5 "
                        "(20.0% -> 50.0%), +30.0 points.")
    assert lines[1] == (f"95% interval of the difference: {100 * c.interval[0]:+.1f} to {100 * c.interval[1]:+.1f} "
                        "points (bootstrap over the 4 templates, each drawn with all its tasks, since a template's "
                        f"tasks succeed or fail together; {RESAMPLES:,} resamples).")
    assert c.interval[0] < 0 < c.interval[1]  # one flipped template of four is no sure gain
    assert not any("Wald" in line or "McNemar" in line for line in lines)  # task-level: would flatter
    assert lines[2].startswith("Seen templates (6 tasks of 3 templates): solved 2 -> 1 (33.3% -> 16.7%), -16.7 "
                               "points, 95% interval ") and lines[2].endswith("; 0 gained, 1 lost.")
    assert lines[3] == ("Held-out templates (4 tasks of 1 template): solved 0 -> 4 (0.0% -> 100.0%), +100.0 points, "
                        "one template, so no interval (its tasks move together); 4 gained, 0 lost.")
    # macro: s0 1 -> 1/2, s1 and s2 0 -> 0, h 0 -> 1: 25.0% -> 37.5%
    assert lines[4].startswith("Macro average over the 4 templates (each weighs the same): 25.0% -> 37.5%, "
                               "+12.5 points, 95% interval ")
    assert lines[5:] == ["Gained (4): h/0, h/1, h/2, h/3.", "Lost (1): s/1."]
    unknown = [{**r, "evaluate.templates": {"s/0": "s0"}} for r in rows]  # a task without a template: over tasks
    assert "paired bootstrap over the tasks" in comparison_lines(unknown)[1]


def test_the_moved_templates_are_those_whose_solved_tasks_changed_lost_ones_first() -> None:
    from webrl.runs.report import moved_templates, moved_templates_table

    rows = _held_out_flip_rows()  # s0: 2 -> 1 (s/1 lost); h: 0 -> 4; s1, s2 unchanged
    last, moved = moved_templates(rows)  # type: ignore[misc]
    assert last == 1 and [(m.template, m.group, m.start, m.per_cell) for m in moved] == [
        ("s0", "seen", 2, [1]), ("h", "held-out", 0, [4])]
    header, body = moved_templates_table(last, moved, {"s/0": "Show | pipes", "h/0": "How many orders has X placed?"})
    assert header == ["template", "group", "tasks", "phase 0", "phase 1", "change"]
    assert body == [["s0: Show | pipes (0, 1)", "seen", "2", "2", "1", "-1"],
                    ["h: How many orders has X placed? (0, 1, 2 and 1 more)", "held-out", "4", "0", "4", "+4"]]
    assert moved_templates([{**r, "evaluate.templates": {"s/0": "s0"}} for r in rows]) is None  # a template unknown
    assert moved_templates(rows[:1]) is None  # nothing after phase 0


def test_the_template_table_splits_each_phase_s_success(tmp_path) -> None:
    from webrl.runs.report import template_table

    rows = [*_held_out_flip_rows(), {"phase": 2, "status": "running"}]
    header, body = template_table(rows)
    assert header == ["phase", "tasks", "templates", "seen templates", "held-out templates", "macro over templates"]
    assert body == [["0", "2/10 = 20.0%", "4 (3 seen, 1 held-out)", "2/6 = 33.3%", "0/4 = 0.0%", "25.0%"],
                    ["1", "5/10 = 50.0%", "4 (3 seen, 1 held-out)", "1/6 = 16.7%", "4/4 = 100.0%", "37.5%"]]
    assert template_table([PHASE_0, PHASE_1]) == (header, [])  # no templates known: no table


def test_the_report_reads_templates_from_the_task_table(settings, tmp_path, capsys) -> None:
    from webrl.agent.schemas import TaskConfig
    from webrl.db import models as m
    from webrl.db.migrate import upgrade
    from webrl.db.repository import upsert_task
    from webrl.db.session import session_scope
    from webrl.runs.report import phase_rows, write_report

    upgrade(settings)
    rows = _held_out_flip_rows()
    with session_scope(settings) as s:
        for split, key, template in [("test", k, t) for k, t in rows[0]["evaluate.templates"].items()] + [
                ("train", "train/0", "s0"), ("train", "train/1", "s1"), ("train", "train/2", "s2")]:
            number = int(template.strip("sh") or 9)
            upsert_task(s, key, TaskConfig(task_id=key, sites=["reddit"], intent=f"do {key}", start_url="__REDDIT__/",
                                           intent_template_id=number), origin="seed", split=split)
        run = m.Run(name="t", options={"orm": ""})
        s.add(run)
        s.flush()
        for r in rows:
            s.add(m.Phase(run_id=run.id, index=r["phase"], status="done", metrics={
                "evaluate.success": len(r["evaluate.solved"]) / 10, "evaluate.solved": r["evaluate.solved"],
                "evaluate.keys": r["evaluate.keys"]}))
    read = phase_rows(settings, "t")
    assert read[0]["evaluate.templates"]["h/0"] == "reddit:9" and read[0]["evaluate.seen_templates"] == [
        "reddit:0", "reddit:1", "reddit:2"]
    text = write_report(settings, "t", tmp_path).read_text()
    assert text.splitlines()[2].startswith("Machine: ")
    assert "## Success by template group" in text and "| 1 | 5/10 = 50.0% | 4 (3 seen, 1 held-out) |" in text
    assert "Held-out templates (4 tasks of 1 template): solved 0 -> 4" in text
    assert "## Templates that moved, phase 1 against the SFT actor" in text
    assert "| reddit:0: do s/0 (0, 1) | seen | 2 | 2 | 1 | -1 |" in text
    assert "| reddit:9: do h/0 (0, 1, 2 and 1 more) | held-out | 4 | 0 | 4 | +4 |" in text

    from webrl.commands.train import print_phase_table

    capsys.readouterr()
    print_phase_table(settings, "t")
    shown = " ".join(capsys.readouterr().out.split())
    assert "success by template group" in shown and "4/4 = 100.0%" in shown  # rich wraps the other cells
    assert "Held-out templates (4 tasks of 1 template): solved 0 -> 4" in shown


def test_the_lineage_lists_the_run_s_own_checkpoints_with_paths_inside_the_artifacts_store(settings, tmp_path) -> None:
    """Two runs in one home: each report names only the checkpoints its phases published and their ancestors, by
    paths relative to the artifacts store (a committed report reads the same on any machine)."""
    from webrl.db import models as m
    from webrl.db.migrate import upgrade
    from webrl.db.session import session_scope
    from webrl.runs.report import write_report

    upgrade(settings)
    store = settings.artifacts_dir
    with session_scope(settings) as s:
        for name, versions in (("seed0", ("a1", "a2")), ("seed1", ("b1",))):
            run = m.Run(name=name, options={})
            s.add(run)
            s.flush()
            for index, version in enumerate(versions, start=1):
                metrics = {**PHASE_1, "train.actor_version": version, "train.critic_version": version}
                s.add(m.Phase(run_id=run.id, index=index, status="done", metrics=metrics))
                for role in ("actor", "critic"):
                    parent = versions[index - 2] if index > 1 else ("sft" if role == "actor" else None)
                    s.add(m.Checkpoint(role=role, version=version, parent_version=parent, phase=index, sha256="f" * 64,
                                       path=str(store / "models" / role / version)))
        s.add(m.Checkpoint(role="actor", version="sft", path="/elsewhere/actor-sft", sha256="e" * 64))

    def lineage_rows(run: str) -> list[list[str]]:
        text = write_report(settings, run, tmp_path / run).read_text()
        table = text.split("## Checkpoint lineage")[1].strip().splitlines()[2:]
        return [[cell.strip() for cell in line.strip("|").split("|")] for line in table]

    seed0 = lineage_rows("seed0")
    assert [(r[0], r[1]) for r in seed0] == [("actor", "a1"), ("critic", "a1"), ("actor", "a2"), ("critic", "a2"),
                                           ("actor", "sft")]
    assert seed0[0][5] == "models/actor/a1" and seed0[4][5] == "/elsewhere/actor-sft"  # outside the store: as stored
    assert {r[1] for r in lineage_rows("seed1")} == {"b1", "sft"}
