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


def test_rollouts_go_through_the_actor_service_in_the_distributed_mode(tmp_path) -> None:
    def through_actor(**values: object) -> bool:
        return Settings(home=tmp_path, _env_file=None, **values).rollouts_through_actor

    assert not through_actor()  # embedded: the rollout job loads the checkpoint
    assert through_actor(broker_url="redis://127.0.0.1:6379/3")
    assert not through_actor(broker_url="redis://127.0.0.1:6379/3", rollout_policy="checkpoint")
    assert through_actor(rollout_policy="endpoint")
    with pytest.raises(ValidationError, match="rollout_policy"):
        Settings(home=tmp_path, _env_file=None, rollout_policy="vllm")


@pytest.mark.slow  # loads the task suite and imports torch
def test_cli_train_stops_in_one_line_when_the_actor_service_cannot_serve(
        free_sites: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from webrl.cli import app
    from webrl.models.tiny import build_tiny_folder

    actor = build_tiny_folder(["Show me the products", 'do(action="Click", element="3")'] * 10,
                              free_sites.home / "actor", size="test", vocab_size=600)
    monkeypatch.setenv("WEBRL_ROLLOUT_POLICY", "endpoint")
    monkeypatch.setenv("WEBRL_ACTOR_URL", "http://127.0.0.1:9")  # nothing listens there
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["train", "--preset", "smoke", "--actor", str(actor)])
    assert result.exit_code == 1, result.output
    *_, last = result.output.splitlines()  # after "loaded the sandbox task suite" on a fresh database
    assert last.startswith("error: cannot ask the actor service what it serves (GET http://127.0.0.1:9/v1/model, "
                           "WEBRL_ACTOR_URL)")
    assert "Traceback" not in result.output
