"""The viewer app in-process on a real SQLite database: the API key as every service wants it (bearer header, or
the cookie its login page sets), security headers on every answer, a run in progress showing its stage and
refreshing, trajectories filtered by run (linked from the run's page), bad filters answered 422 naming the field,
reads that cannot write, and `webrl ui` refusing an open bind."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from typer.testing import CliRunner

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.migrate import upgrade
from webrl.db.session import read_only_scope, session_scope
from webrl.orchestration.pipeline import PipelineOptions
from webrl.viewer.app import CSP, KEY_COOKIE, build_app

KEY = "k" * 32


@pytest.fixture
def db(tmp_path: Path) -> Settings:
    """A migrated SQLite home with a run stopped inside phase 1 (after its filter stage)."""
    settings = Settings(home=tmp_path, database={"url": f"sqlite:///{tmp_path / 'webrl.db'}"}, _env_file=None)
    upgrade(settings)
    with session_scope(settings) as s:
        run = m.Run(name="live", options=PipelineOptions(run="live").to_json())
        s.add(run)
        s.flush()
        s.add_all([
            m.Phase(run_id=run.id, index=0, status="done", stages_done=["evaluate", "seed-rollout"],
                    metrics={"evaluate.success": 0.25, "evaluate.seconds": 12.0, "seed-rollout.seconds": 30.0},
                    finished_at=datetime.now(UTC)),
            m.Phase(run_id=run.id, index=1, status="running", stages_done=["generate", "filter"],
                    metrics={"generate.generated": 0, "generate.seconds": 3.0, "filter.seconds": 1.5}),
        ])
    return settings


@pytest.fixture
def client(db: Settings) -> Iterator[TestClient]:
    with TestClient(build_app(db)) as c:
        yield c


def test_a_run_in_progress_shows_its_stage_and_refreshes(client: TestClient) -> None:
    listing = client.get("/")
    assert listing.status_code == 200 and "phase 1: rollout" in listing.text
    page = client.get("/runs/live")
    assert page.status_code == 200
    assert "running: phase 1: rollout" in page.text and '<meta http-equiv="refresh" content="10">' in page.text
    assert "1.5 s" in page.text and "25.0%" in page.text  # stage timings; the report's table cell
    assert client.get("/runs/live/success.png").content[:8] == b"\x89PNG\r\n\x1a\n"
    assert client.get("/runs/nope").status_code == 404


def _trajectories_of(db: Settings, runs: dict[str, int]) -> int:
    """Store one task and, per run name, that many phase-1 trajectories of it ("" = stand-alone, run 0); the task id."""
    from webrl.agent.schemas import TaskConfig, Trajectory
    from webrl.db import repository as repo

    config = TaskConfig(task_id=1, sites=["shopping"], intent="Find a book", start_url="__SHOPPING__/")
    with session_scope(db) as s:
        task = repo.upsert_task(s, "seed/1", config, origin="seed", split="train")
        for name, count in runs.items():
            run_id = 0
            if name:
                run = s.scalar(select(m.Run).where(m.Run.name == name)) or m.Run(name=name, options={})
                s.add(run)
                s.flush()
                run_id = run.id
            for attempt in range(count):
                repo.save_trajectory(s, task.id, 1, attempt, Trajectory(task_id="seed/1", intent=config.intent),
                                     run_id=run_id)
        return task.id


def _total(client: TestClient, **params: object) -> int:
    page = client.get("/trajectories", params=params)
    assert page.status_code == 200, page.text
    return int(page.text.split('<span id="total">', 1)[1].split("<", 1)[0])


def test_trajectories_filter_by_run_and_the_run_page_links_to_its_own(db: Settings, client: TestClient) -> None:
    _trajectories_of(db, {"live": 2, "other": 3, "": 1})
    assert _total(client) == 6
    assert _total(client, run="live") == 2 and _total(client, run="other", phase=1) == 3
    assert _total(client, run="nope") == 0  # an unknown run, and never the stand-alone rollouts (run 0)
    listing = client.get("/trajectories", params={"run": "live"}).text
    assert '<option selected>live</option>' in listing and '<a href="/runs/live">live</a>' in listing
    run_page = client.get("/runs/live").text
    assert 'href="/trajectories?run=live"' in run_page and 'href="/trajectories?run=live&amp;phase=1"' in run_page


def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    for path in ("/", "/runs/live", "/trajectories", "/static/viewer.css", "/runs/nope"):
        response = client.get(path)
        assert response.headers["content-security-policy"] == CSP, path
        assert response.headers["x-content-type-options"] == "nosniff", path


def test_bad_filters_are_422_naming_the_field(client: TestClient) -> None:
    response = client.get("/trajectories", params={"outcome": "maybe"})
    assert response.status_code == 422 and response.json()["error"]["fields"][0]["field"].endswith("outcome")
    assert client.get("/trajectories", params={"phase": "-1"}).status_code == 422
    assert client.get("/trajectories", params={"phase": "", "site": ""}).status_code == 200  # a form's "any"


TOO_BIG = str(2**64)  # past every integer column (and SQLite's, whose driver overflows on it)


@pytest.mark.parametrize(("path", "field"), [
    (f"/trajectories/{TOO_BIG}", "trajectory_id"), ("/trajectories/2147483648", "trajectory_id"),
    ("/trajectories/0", "trajectory_id"), (f"/tasks/{TOO_BIG}", "task_id"), (f"/screenshots/{TOO_BIG}", "step_id"),
    (f"/runs/live/phases/{TOO_BIG}", "index"), ("/runs/live/phases/-1", "index"),
    (f"/trajectories?phase={TOO_BIG}", "phase"), (f"/trajectories?template={TOO_BIG}", "template"),
    (f"/trajectories?template=-{TOO_BIG}", "template"), (f"/trajectories?task={TOO_BIG}", "task"),
    (f"/trajectories?page={TOO_BIG}", "page"), ("/trajectories?page=100000000", "page"),
])
def test_integers_past_the_database_columns_are_422_naming_the_field(client: TestClient, path: str,
                                                                     field: str) -> None:
    response = client.get(path)
    assert response.status_code == 422, (path, response.text)
    assert response.json()["error"]["fields"][0]["field"].endswith(field), response.text


def test_the_largest_ids_and_the_last_page_are_answered(client: TestClient) -> None:
    from webrl.viewer.queries import MAX_PAGE

    for path in ("/trajectories/2147483647", "/tasks/2147483647", "/screenshots/2147483647",
                 "/runs/live/phases/2147483647"):
        assert client.get(path).status_code == 404, path
    listing = client.get("/trajectories", params={"page": MAX_PAGE, "template": 2**31 - 1, "task": 2**31 - 1})
    assert listing.status_code == 200


def test_the_api_key_guards_every_page_and_a_browser_logs_in(db: Settings) -> None:
    keyed = db.replace(security={"api_key": KEY})
    with TestClient(build_app(keyed)) as c:
        assert c.get("/runs/live").status_code == 401  # an API client: the JSON 401 every service answers
        page = c.get("/runs/live", headers={"accept": "text/html"}, follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"] == "/login?next=/runs/live"
        assert c.get("/healthz").status_code == 200 and c.get("/static/viewer.css").status_code == 200
        assert c.get("/runs/live", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        wrong = c.post("/login", data={"key": "nope", "next": "/runs/live"}, follow_redirects=False)
        assert wrong.status_code == 401 and KEY_COOKIE not in wrong.cookies
        away = c.post("/login", data={"key": KEY, "next": "//evil.example/"}, follow_redirects=False)
        assert away.status_code == 303 and away.headers["location"] == "/"  # never sent off the site
        good = c.post("/login", data={"key": KEY, "next": "/runs/live"}, follow_redirects=False)
        assert good.status_code == 303 and good.headers["location"] == "/runs/live"
        cookie = good.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert c.get("/runs/live").status_code == 200  # the cookie now opens the viewer ...
        token = c.cookies[KEY_COOKIE]
        assert KEY not in token and KEY not in cookie  # ... without carrying the key, which every port would get
        assert c.get("/runs/live", headers={"authorization": f"Bearer {token}"}).status_code == 401  # no bearer key


def test_viewer_reads_cannot_write(db: Settings) -> None:
    with read_only_scope(db) as s:
        assert s.execute(text("SELECT count(*) FROM runs")).scalar() == 1
        with pytest.raises(OperationalError, match="readonly"):
            s.execute(text("DELETE FROM runs"))
    with session_scope(db) as s:
        assert s.execute(text("SELECT count(*) FROM runs")).scalar() == 1


@pytest.mark.postgres
def test_viewer_reads_cannot_write_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    from sqlalchemy.exc import InternalError

    from webrl.db.migrate import downgrade

    settings = Settings(home=tmp_path, database={"url": postgres_url}, _env_file=None)
    upgrade(settings)
    try:
        with read_only_scope(settings) as s, pytest.raises(InternalError, match="read-only transaction"):
            s.execute(text("DELETE FROM runs"))
    finally:
        downgrade(settings)  # the session's Postgres database stays empty for the next test


def test_webrl_ui_refuses_an_open_bind_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from webrl.cli import app
    from webrl.config import get_settings

    for var in ("WEBRL_SECURITY__API_KEY", "WEBRL_SECURITY__ALLOW_NO_AUTH"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["ui", "--host", "0.0.0.0"])
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2 and "without an API key" in result.output


def test_the_run_page_shows_the_actor_metrics_flips_per_site_and_the_paired_comparison(db: Settings,
                                                                                        client: TestClient) -> None:
    keys = [f"t/{i}" for i in range(4)]
    with session_scope(db) as s:
        run = m.Run(name="done", options=PipelineOptions(run="done").to_json())
        s.add(run)
        s.flush()
        s.add_all([
            m.Phase(run_id=run.id, index=0, status="done", stages_done=["evaluate"], metrics={
                "evaluate.success": 0.25, "evaluate.solved": ["t/0"], "evaluate.keys": keys}),
            m.Phase(run_id=run.id, index=1, status="done", stages_done=["train", "evaluate"], metrics={
                "evaluate.success": 0.5, "evaluate.solved": ["t/1", "t/2"], "evaluate.keys": keys,
                "train.kl_exact": 0.0123, "train.log_ratio_k1": -0.004, "train.flips": 0.25,
                "train.flips_gitlab": 0.5, "train.positives_from_failed": 0.75}),
        ])
    page = client.get("/runs/done").text
    for column in ("KL exact", "k1", "flips", "pos. from failed", "flips gitlab"):
        assert f"<th>{column}</th>" in page
    assert '<td class="n">0.0123</td>' in page and '<td class="n">75.0%</td>' in page
    assert "Probe steps whose greedy action changed" in page
    assert "Phase 1 against phase 0 (the SFT actor) on the 4 test tasks both evaluated" in page
    assert "Gained (2): t/1, t/2." in page and "Lost (1): t/0." in page
    assert "Probe steps" not in client.get("/runs/live").text  # no phase measured flips
