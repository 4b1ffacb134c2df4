"""``webrl pages check``: the first observation of an allowed page with timings, through the browser pool's
code (real Chromium, a fixture page served locally); a URL off the allow-list is a one-line error."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from webrl.cli import app
from webrl.config import get_settings

pytestmark = [pytest.mark.browser]


@pytest.fixture
def allowed_fixtures(monkeypatch: pytest.MonkeyPatch, tmp_path, fixture_url: str):
    """The CLI's settings (read from the environment): a temporary home, the fixture host allowed."""
    monkeypatch.setenv("WEBRL_HOME", str(tmp_path))
    monkeypatch.setenv("WEBRL_SECURITY__ALLOWED_HOSTS", fixture_url.split("//", 1)[1])
    get_settings.cache_clear()
    yield fixture_url
    get_settings.cache_clear()


def test_check_prints_the_observation_with_timings_as_json(allowed_fixtures: str) -> None:
    urls = [f"{allowed_fixtures}/elements.html", f"{allowed_fixtures}/redirect?to={allowed_fixtures}/next.html"]
    result = CliRunner().invoke(app, ["pages", "check", *urls, "--json"])
    assert result.exit_code == 0, result.output
    first, second = json.loads(result.stdout)["pages"]
    assert first["url"] == first["final_url"] == urls[0] and first["title"] == "Elements fixture"
    assert '<a id="0"> Next page </a>' in first["observation"] and first["elements"] > 5 and first["error"] is None
    assert 0 < first["settle_ms"] < first["observe_ms"] < first["reset_ms"]
    assert second["url"] == urls[1] and second["final_url"] == f"{allowed_fixtures}/next.html"
    assert second["title"] == "Next page" and second["tabs"] == ["Next page"]


def test_check_renders_a_table_and_the_observation(allowed_fixtures: str) -> None:
    result = CliRunner().invoke(app, ["pages", "check", f"{allowed_fixtures}/icons.html"])
    assert result.exit_code == 0, result.output
    assert "pages as the agent sees them" in result.stdout and "settle" in result.stdout
    assert "<html>" in result.stdout and f"{allowed_fixtures}/icons.html" in result.stdout


def test_a_url_off_the_allow_list_is_a_one_line_error(allowed_fixtures: str, outside_url: str) -> None:
    outside = f"{outside_url}/outside.html"
    result = CliRunner().invoke(app, ["pages", "check", f"{allowed_fixtures}/next.html", outside])
    assert result.exit_code == 2
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert outside in result.stderr and "allow-list" in result.stderr
    not_http = CliRunner().invoke(app, ["pages", "check", "file:///etc/passwd"])
    assert not_http.exit_code == 2 and "'file:///etc/passwd' is not an http(s) URL" in not_http.stderr
