"""``webrl eval`` on the suite's test tasks adds the actor's success by template group."""

from __future__ import annotations

from pathlib import Path


def test_eval_shows_seen_held_out_and_macro_success(settings, tmp_path: Path, capsys) -> None:
    from webrl.agent.schemas import Trajectory
    from webrl.commands.train import print_template_groups
    from webrl.db.migrate import upgrade
    from webrl.db.repository import save_trajectory, tasks_where
    from webrl.db.session import session_scope
    from webrl.orchestration.evaluate import EVAL_PHASE, evaluation_attempt
    from webrl.sandbox.tasks.suite import load_suite
    from webrl.store.template_groups import template_groups

    upgrade(settings)
    load_suite(settings, 0)
    actor = tmp_path / "actor"
    actor.mkdir()
    (actor / "config.json").write_text("{}")
    groups = template_groups(settings)
    with session_scope(settings) as s:
        tests = tasks_where(s, split="test")
        held_out = [t for t in tests if groups.group_of(t.key) == "held-out"]
        solved = held_out[:20] if len({groups.template_of[t.key] for t in held_out[:20]}) == 1 else held_out[:1]
        for task in tests:
            save_trajectory(s, task.id, EVAL_PHASE, evaluation_attempt(settings, actor), Trajectory(
                task_id=task.key, intent="x", steps=[], env_score=1.0 if task in solved else 0.0), purpose="eval")
    capsys.readouterr()
    print_template_groups(settings, actor, split="test", limit=None, max_steps=None)
    shown = " ".join(capsys.readouterr().out.split())
    # one whole held-out template of 20 solved: 20/165 overall, 20/80 held-out, 1 of 65 templates: 1.5% macro
    assert len(solved) == 20
    for row in ("│ all tasks │ 165 │ 65 │ 20/165 = 12.1% │", "│ seen templates │ 85 │ 61 │ 0/85 = 0.0% │",
                "│ held-out templates │ 80 │ 4 │ 20/80 = 25.0% │", "│ macro over templates │ 165 │ 65 │ 1.5% │"):
        assert row in shown, row
    capsys.readouterr()
    print_template_groups(settings, actor, split="train", limit=None, max_steps=None)  # no test templates: nothing
    assert capsys.readouterr().out == ""
