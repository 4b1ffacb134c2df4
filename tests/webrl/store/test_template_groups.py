"""The templates of the test tasks and those training saw, read from the task table of the loaded suite."""

from __future__ import annotations

from collections import Counter

from webrl.method.template_split import HELD_OUT, SEEN


def test_the_suite_has_85_seen_template_and_80_held_out_template_test_tasks(settings) -> None:
    from webrl.db.migrate import upgrade
    from webrl.sandbox.tasks.suite import HOLDOUT_PER_TEMPLATE, HOLDOUT_TEMPLATES, TEST_SIZE, load_suite
    from webrl.store.template_groups import template_groups

    upgrade(settings)
    load_suite(settings, 0)
    groups = template_groups(settings)
    assert len(groups.template_of) == TEST_SIZE == 165
    split = groups.split(groups.template_of)
    assert (len(split[SEEN]), len(split[HELD_OUT])) == (85, HOLDOUT_TEMPLATES * HOLDOUT_PER_TEMPLATE)
    assert len(groups.templates(split[HELD_OUT])) == HOLDOUT_TEMPLATES
    assert Counter(groups.template_of[k] for k in split[HELD_OUT]).most_common()[-1][1] == HOLDOUT_PER_TEMPLATE
    assert len(groups.templates(split[SEEN])) == 61 and groups.templates(split[SEEN]) <= groups.seen
    assert all(template.split(":")[0] in {"shopping", "shopping_admin", "reddit", "gitlab"}
               for template in groups.template_of.values())


def test_evaluation_solved_reads_one_actor_s_successful_episodes(settings) -> None:
    from webrl.agent.schemas import TaskConfig, Trajectory
    from webrl.db.migrate import upgrade
    from webrl.db.repository import save_trajectory, upsert_task
    from webrl.db.session import session_scope
    from webrl.store.template_groups import evaluation_solved

    upgrade(settings)
    with session_scope(settings) as s:
        for i, (attempt, score) in enumerate([(7, 1.0), (7, 0.0), (8, 1.0), (7, None)]):
            key = f"t/{i}"
            task = upsert_task(s, key, TaskConfig(task_id=key, sites=["reddit"], intent=f"do {key}",
                                                  start_url="__REDDIT__/"), origin="seed", split="test")
            save_trajectory(s, task.id, 0, attempt, Trajectory(task_id=key, intent="x", steps=[], env_score=score),
                            purpose="eval")
    assert evaluation_solved(settings, ["t/0", "t/1", "t/2", "t/3"], phase=0, attempt=7) == {"t/0"}
    assert evaluation_solved(settings, ["t/1", "t/2"], phase=0, attempt=8) == {"t/2"}
    assert evaluation_solved(settings, ["t/0"], phase=1, attempt=7) == set()
