"""`webrl ui` in real Chromium on the database of a real smoke run: the run page shows the report's phase table
and plot, a phase its generated tasks with their lineage, a trajectory every step (screenshot, observation with
the acted-on element, response, log-prob heat map), the filters narrow the list, a task's attempts sit side by
side, hostile page content never runs, and no page logs a console error. Screenshots of each page are saved
under the test's tmp folder."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from webrl.db import models as m
from webrl.db.session import session_scope

HOSTILE = ('<script>window.__pwned = "script"; alert("script")</script>'
           '<img src="x" onerror="window.__pwned = \'img\'; alert(\'img\')">'
           '<a href="javascript:window.__pwned = \'link\'; alert(\'link\')" id="7">click me</a>'
           '<svg onload="window.__pwned = \'svg\'"></svg><iframe src="javascript:alert(1)"></iframe>')

# The module's first test also waits for the tiny actor's bootstrap and the smoke run (10-30 minutes on the
# busy 2-core development machine).
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def hostile_trajectory(smoke_home) -> int:  # type: ignore[no-untyped-def]
    """A trajectory whose pages were hostile: script, onerror and javascript: links in the observation, the
    response, the parse error, the answer and the task's intent. Returns its id."""
    from webrl.agent.actions import parse_action
    from webrl.agent.schemas import Observation, Step, TaskConfig, Trajectory
    from webrl.db import repository as repo

    obs = Observation(html=f"<main>{HOSTILE}</main>", url="http://127.0.0.1:7770/evil", title=HOSTILE)
    steps = [Step(index=0, observation=obs, response=f"# {HOSTILE}\ndo(action=\"Click\", element=\"7\")",
                  action=parse_action('do(action="Click", element="7")'), token_ids=[1, 2], logprobs=[-0.1, -2.5]),
             Step(index=1, observation=obs.model_copy(update={"error": HOSTILE}), response=HOSTILE,
                  parse_error=HOSTILE)]
    traj = Trajectory(task_id="hostile", intent=HOSTILE, steps=steps, answer=HOSTILE, stop_reason="exit",
                      env_score=0.0, last_observation=obs)
    config = TaskConfig(task_id="hostile", sites=["shopping"], intent=HOSTILE, start_url="__SHOPPING__")
    with session_scope(smoke_home.settings) as s:
        task = repo.upsert_task(s, "hostile/1", config, origin="test", split="hostile")
        return repo.save_trajectory(s, task.id, 0, 0, traj, purpose="eval").id


def _count(settings, query) -> int:  # type: ignore[no-untyped-def]
    with session_scope(settings) as s:
        return int(s.scalar(query))


def test_run_page_shows_the_phase_table_the_plot_and_stage_timings(visit, smoke_home) -> None:  # type: ignore[no-untyped-def]
    visit.open("/")
    visit.page.get_by_role("link", name="smoke").click()
    visit.page.wait_for_url("**/runs/smoke")
    table = visit.page.locator("table.phases")
    assert table.locator("thead th").first.inner_text() == "phase"
    assert table.locator("tbody tr td:first-child").all_inner_texts() == ["0", "1"]
    assert "test overall" in table.locator("thead").inner_text()
    plot = visit.page.locator('img[src="/runs/smoke/success.png"]')
    plot.wait_for()
    assert plot.evaluate("img => img.complete && img.naturalWidth") > 300  # the PNG loaded and decoded
    assert "finished" in visit.page.locator(".meta").inner_text()
    timings = visit.page.locator("h2:has-text('Stage timings') + table")
    assert {"rollout", "train", "evaluate"} <= set(timings.locator("thead th").all_inner_texts())
    visit.shoot("run")
    assert visit.errors == [] and visit.dialogs == []


def test_phase_page_lists_generated_tasks_with_lineage_and_the_filters_verdict(visit, smoke_home) -> None:  # type: ignore[no-untyped-def]
    with session_scope(smoke_home.settings) as s:
        metrics = s.scalar(select(m.Phase.metrics).where(m.Phase.index == 1))
    visit.open("/runs/smoke/phases/1")
    rows = visit.page.locator("table.grid tbody tr")
    assert rows.count() == metrics["generate.generated"]
    assert visit.page.locator("tbody .badge.ok").count() == metrics["filter.kept"]
    parents = rows.locator("td:nth-child(4) a")
    assert parents.count() == metrics["generate.generated"]  # every generated task names the failure it came from
    parents.first.click()
    visit.page.wait_for_url("**/tasks/*")
    assert visit.page.locator("p.lineage").inner_text().startswith("evolved into")
    visit.shoot("phase")
    assert visit.errors == []


def test_trajectory_page_shows_every_step(visit, smoke_home) -> None:  # type: ignore[no-untyped-def]
    with session_scope(smoke_home.settings) as s:
        traj = s.scalars(select(m.TrajectoryRow).where(m.TrajectoryRow.purpose == "train", m.TrajectoryRow.phase == 1)
                         .order_by(m.TrajectoryRow.n_steps.desc())).first()
        steps = [(st.response, len(st.token_ids), st.screenshot, st.action, st.observation["html"])
                 for st in traj.steps]
        trajectory_id = traj.id
    assert len(steps) >= 2
    visit.open(f"/trajectories/{trajectory_id}")
    sections = visit.page.locator("section.step")
    assert sections.count() == len(steps)
    for i, (response, n_tokens, screenshot, action, html) in enumerate(steps):
        section = sections.nth(i)
        # the browser normalises whitespace (a sampled \r, a no-break space) in what inner_text returns
        assert section.locator("pre.response").inner_text().split() == response.split()
        assert section.locator(".heat .tok").count() == n_tokens  # one heat-map cell per generated token
        assert screenshot is not None  # the run was started with --screenshots
        image = section.locator("img.shot")
        image.scroll_into_view_if_needed()
        assert image.evaluate("img => img.decode().then(() => img.naturalWidth)") == 640
        element = action.split('element="')[1].split('"')[0] if action and 'element="' in action else None
        if element is not None and f'id="{element}"' in html:  # the tiny actor may name an id the page lacks
            assert f'id="{element}"' in section.locator("mark.acted").inner_text()
        trained = section.locator("table.trained tbody tr")  # phase 1 trained on every step of its rollouts
        assert trained.count() == 1 and trained.first.locator("td").first.inner_text() == "phase 1"
        assert trained.first.locator(".badge").inner_text() in {"used", "masked"}
    visit.shoot("trajectory")
    assert visit.errors == []


def test_filters_narrow_the_list(visit, smoke_home) -> None:  # type: ignore[no-untyped-def]
    settings = smoke_home.settings
    everything = _count(settings, select(func.count()).select_from(m.TrajectoryRow))
    evals = _count(settings, select(func.count()).select_from(m.TrajectoryRow).where(m.TrajectoryRow.purpose == "eval"))
    phase1_train = _count(settings, select(func.count()).select_from(m.TrajectoryRow)
                          .where(m.TrajectoryRow.purpose == "train", m.TrajectoryRow.phase == 1))
    visit.open("/trajectories")
    assert int(visit.page.locator("#total").inner_text()) == everything
    visit.page.select_option("select[name=purpose]", "eval")
    visit.page.get_by_role("button", name="Filter").click()
    visit.page.wait_for_url("**purpose=eval**")
    assert int(visit.page.locator("#total").inner_text()) == evals < everything
    assert set(visit.page.locator("#trajectories tbody td:nth-child(3)").all_inner_texts()) == {"eval"}
    visit.page.select_option("select[name=purpose]", "train")
    visit.page.select_option("select[name=phase]", "1")
    visit.page.get_by_role("button", name="Filter").click()
    visit.page.wait_for_url("**phase=1**")
    assert int(visit.page.locator("#total").inner_text()) == phase1_train < everything
    site = visit.page.locator("#trajectories tbody td:nth-child(4)").first.inner_text()
    visit.page.select_option("select[name=site]", site)
    visit.page.get_by_role("button", name="Filter").click()
    visit.page.wait_for_url(f"**site={site}**")
    narrowed = int(visit.page.locator("#total").inner_text())
    assert 0 < narrowed <= phase1_train
    assert set(visit.page.locator("#trajectories tbody td:nth-child(4)").all_inner_texts()) == {site}
    visit.open("/trajectories?outcome=success")
    successes = int(visit.page.locator("#total").inner_text())
    visit.open("/trajectories?outcome=failure")
    failures = int(visit.page.locator("#total").inner_text())
    visit.open("/trajectories?outcome=unscored")
    assert successes + failures + int(visit.page.locator("#total").inner_text()) == everything
    visit.shoot("trajectories")
    assert visit.errors == []


def test_a_tasks_attempts_side_by_side_across_phases(visit, smoke_home) -> None:  # type: ignore[no-untyped-def]
    with session_scope(smoke_home.settings) as s:
        task_id, attempts = s.execute(
            select(m.TrajectoryRow.task_id, func.count(m.TrajectoryRow.id)).group_by(m.TrajectoryRow.task_id)
            .order_by(func.count(m.TrajectoryRow.id).desc()).limit(1)).one()
        phases = sorted(set(s.scalars(select(m.TrajectoryRow.phase).where(m.TrajectoryRow.task_id == task_id))))
    assert attempts >= 2 and phases == [0, 1]  # the test tasks: phase 0, phase 1 and `webrl eval`
    visit.open(f"/tasks/{task_id}")
    columns = visit.page.locator("table.attempts thead th")
    assert columns.count() == 1 + attempts
    heads = " ".join(columns.all_inner_texts())
    assert "phase 0" in heads and "phase 1" in heads
    assert visit.page.locator("table.attempts tbody tr").first.locator("code.action, .err").count() >= attempts
    visit.shoot("task")
    assert visit.errors == []


def test_hostile_page_content_never_runs(visit, viewer_url, hostile_trajectory) -> None:  # type: ignore[no-untyped-def]
    response = visit.open(f"/trajectories/{hostile_trajectory}")
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp  # no script source at all
    visit.page.locator("mark.acted").first.wait_for()
    visit.page.wait_for_timeout(500)  # time for an onerror or a script to fire, were any rendered
    assert visit.page.evaluate("window.__pwned") is None
    assert visit.dialogs == []
    for selector in ("main script", "main img:not(.shot)", "main a[href^='javascript']", "main iframe", "main svg"):
        assert visit.page.locator(selector).count() == 0, selector
    text = visit.page.locator("main").inner_text()
    assert text.count("<script>") >= 5  # intent, observation, its error, response, answer: shown as text
    assert HOSTILE.split("<a ")[0] in visit.page.locator("pre.obs").first.inner_text().replace("\n", "")
    visit.page.locator("pre.obs").first.get_by_text("click me").click()  # would follow a javascript: link
    visit.page.wait_for_timeout(300)
    assert visit.page.evaluate("window.__pwned") is None and visit.dialogs == []
    visit.shoot("hostile")
    assert visit.errors == []
