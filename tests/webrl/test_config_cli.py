"""Settings read the WEBRL_ environment once; the CLI exposes only commands that work."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from webrl.config import SANDBOX_PORTS, SANDBOX_SITES, Settings, get_settings


def test_defaults_live_under_home(tmp_path) -> None:
    s = Settings(home=tmp_path, _env_file=None)
    assert s.database_url == f"sqlite:///{(tmp_path / 'webrl.db').as_posix()}"
    assert s.artifacts_dir == tmp_path / "artifacts"
    assert s.eager is True
    assert s.site_url("reddit") == f"http://127.0.0.1:{SANDBOX_PORTS['reddit']}"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("WEBRL_HOME", str(tmp_path))
    monkeypatch.setenv("WEBRL_BROKER_URL", "redis://127.0.0.1:6379/3")
    monkeypatch.setenv("WEBRL_GITLAB_URL", "http://gitlab.internal:8023/")
    monkeypatch.setenv("WEBRL_ALLOWED_HOSTS", "a.example:80, b.example")
    get_settings.cache_clear()
    s = get_settings()
    try:
        assert s.eager is False
        assert s.result_backend == s.redis_url == "redis://127.0.0.1:6379/3"
        assert s.site_url("gitlab") == "http://gitlab.internal:8023"
        assert s.host_allow_list() == ["a.example:80", "b.example"]
    finally:
        get_settings.cache_clear()


def test_allow_list_defaults_to_the_site_hosts(tmp_path) -> None:
    """Exactly the sites that exist: configured URLs and the served sandbox sites, no port nothing serves."""
    from webrl.sandbox.sites import SITES

    assert set(SANDBOX_SITES) == set(SITES)
    s = Settings(home=tmp_path, reddit_url="http://forum.test:9999", _env_file=None)
    assert s.host_allow_list() == sorted(["forum.test:9999", *(f"127.0.0.1:{SANDBOX_PORTS[site]}"
                                                                for site in ("shopping", "shopping_admin", "gitlab"))])
    with_map = Settings(home=tmp_path, map_url="http://map.test:3000", _env_file=None)
    assert "map.test:3000" in with_map.host_allow_list()
    assert f"127.0.0.1:{SANDBOX_PORTS['wikipedia']}" not in with_map.host_allow_list()


def test_bad_values_are_rejected_naming_the_field(tmp_path) -> None:
    with pytest.raises(ValidationError, match="dtype"):
        Settings(home=tmp_path, dtype="float8", _env_file=None)
    with pytest.raises(ValueError, match="unknown site 'ebay'"):
        Settings(home=tmp_path, _env_file=None).site_url("ebay")


def test_cli_db_upgrade_creates_the_database(settings: Settings) -> None:
    from webrl.cli import app

    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert "is at head" in result.output
    assert (settings.home / "webrl.db").exists()


def test_cli_bootstrap_rejects_an_unknown_word_tokenisation_naming_the_flag(settings: Settings) -> None:
    from webrl.cli import app

    result = CliRunner().invoke(app, ["bootstrap", "--words", "glued"], env={"COLUMNS": "200"})  # one line
    assert result.exit_code == 2
    assert "--words" in result.output and "unknown word tokenisation 'glued'" in result.output
    assert not (settings.home / "webrl.db").exists()  # refused before touching anything
