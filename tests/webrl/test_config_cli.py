"""Settings read the WEBRL_ environment once, a group's field as ``WEBRL_<GROUP>__<FIELD>``; the CLI exposes only
commands that work."""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from webrl.config import (
    SANDBOX_PORTS,
    SANDBOX_SITES,
    Group,
    RenamedSetting,
    Settings,
    get_settings,
    renamed_variables,
    setting_variables,
)

GROUPS = {name: field.annotation for name, field in Settings.model_fields.items()
          if isinstance(field.annotation, type) and issubclass(field.annotation, Group)}


def _clear_webrl_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [n for n in os.environ if n.upper().startswith("WEBRL_")]:
        monkeypatch.delenv(name)


def _value_for(annotation: Any, default: Any) -> tuple[str, Any]:
    """A value other than ``default`` for a field of type ``annotation``: as the environment spells it, and as
    the field holds it once read."""
    if get_origin(annotation) in (Union, UnionType):  # X | None
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    kind = get_origin(annotation) or annotation
    if kind is Literal:
        choice = next(c for c in get_args(annotation) if c != default)
        return choice, choice
    if kind is list:
        return "a.example:1, b.example", ["a.example:1", "b.example"]
    if kind is bool:
        return "true", True
    if kind is int:
        return "4097", 4097
    if kind is float:
        return "123456.5", 123456.5
    if kind is Path:
        return "/elsewhere/x", Path("/elsewhere/x")
    return "http://set.example:1", "http://set.example:1"


def test_every_grouped_setting_is_read_from_its_nested_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``settings.<group>.<field>`` comes from ``WEBRL_<GROUP>__<FIELD>``, each field of each group."""
    _clear_webrl_environment(monkeypatch)
    variables = setting_variables()
    assert GROUPS and set(variables.values()) == (
        {(name,) for name in Settings.model_fields if name not in GROUPS}
        | {(group, field) for group, model in GROUPS.items() for field in model.model_fields})
    for variable, path in variables.items():
        assert variable == "WEBRL_" + "__".join(path).upper()
        if len(path) == 1:
            continue
        group, field = path
        info = GROUPS[group].model_fields[field]
        text, expected = _value_for(info.annotation, info.get_default(call_default_factory=True))
        if variable == "WEBRL_DATABASE__URL":  # validated as a database URL
            text = expected = "postgresql+psycopg://set.example:1/webrl"
        with monkeypatch.context() as mp:
            mp.setenv(variable, text)
            if field == "time_limit_s":  # must stay below the visibility timeout
                mp.setenv("WEBRL_JOBS__VISIBILITY_TIMEOUT_S", "999999")
            assert getattr(getattr(Settings(_env_file=None), group), field) == expected, variable


def test_top_level_settings_keep_their_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _clear_webrl_environment(monkeypatch)
    monkeypatch.setenv("WEBRL_HOME", str(tmp_path))
    monkeypatch.setenv("WEBRL_SEED", "7")
    s = Settings(_env_file=None)
    assert (s.home, s.seed, s.artifacts_dir) == (tmp_path, 7, tmp_path / "artifacts")


def test_a_flat_name_of_before_the_groups_is_refused_with_its_new_name(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    _clear_webrl_environment(monkeypatch)
    monkeypatch.setenv("WEBRL_ACTOR_BACKEND", "openai")
    monkeypatch.setenv("WEBRL_CHROMIUM_PATH", "/opt/chromium")
    with pytest.raises(RenamedSetting) as refused:
        Settings(_env_file=None)
    message = str(refused.value)
    assert "WEBRL_ACTOR_BACKEND is now WEBRL_ACTOR__BACKEND (set in the environment)" in message
    assert "WEBRL_CHROMIUM_PATH is now WEBRL_BROWSER__CHROMIUM_PATH" in message
    monkeypatch.delenv("WEBRL_ACTOR_BACKEND")
    monkeypatch.delenv("WEBRL_CHROMIUM_PATH")
    dotenv = tmp_path / ".env"
    dotenv.write_text("WEBRL_BROKER_VISIBILITY_TIMEOUT_S=99999\n")
    with pytest.raises(RenamedSetting, match=r"WEBRL_BROKER_VISIBILITY_TIMEOUT_S is now "
                                             r"WEBRL_JOBS__VISIBILITY_TIMEOUT_S \(set in \.env\)"):
        Settings(_env_file=dotenv)


def test_compose_s_env_file_in_the_working_directory_is_not_read(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """`cp .env.example .env` is compose's setup; `make demo` run beside it must not load the containers' models."""
    _clear_webrl_environment(monkeypatch)
    (tmp_path / ".env").write_text((Path(__file__).parents[2] / ".env.example").read_text()
                                   + "WEBRL_ACTOR__MODEL=/var/lib/webrl/artifacts/models/actor-sft\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.actor.model is None and settings.security.api_key is None
    assert Settings(_env_file=tmp_path / ".env").actor.model == "/var/lib/webrl/artifacts/models/actor-sft"


def test_every_old_flat_name_maps_to_a_setting() -> None:
    """The table is built from the groups: one old name per grouped field, none a current name."""
    renamed = renamed_variables()
    variables = setting_variables()
    assert len(renamed) == sum(len(model.model_fields) for model in GROUPS.values())
    assert set(renamed.values()) == {v for v, path in variables.items() if len(path) == 2}
    assert not set(renamed) & set(variables)
    assert renamed["WEBRL_ACTOR_MAX_PROMPT_TOKENS"] == "WEBRL_ACTOR__MAX_PROMPT_TOKENS"
    assert renamed["WEBRL_JOB_TIME_LIMIT_S"] == "WEBRL_JOBS__TIME_LIMIT_S"
    assert renamed["WEBRL_API_KEY"] == "WEBRL_SECURITY__API_KEY"


def test_a_misspelt_grouped_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_webrl_environment(monkeypatch)
    monkeypatch.setenv("WEBRL_ACTOR__BAKEND", "openai")
    with pytest.raises(ValidationError, match=r"actor\.bakend"):
        Settings(_env_file=None)


def test_replace_merges_into_groups_and_refuses_unknown_names(tmp_path: Path) -> None:
    s = Settings(home=tmp_path, _env_file=None)
    changed = s.replace(seed=3, actor={"url": "http://actor.test:1", "max_new_tokens": 8})
    assert (changed.seed, changed.actor.url, changed.actor.max_new_tokens) == (3, "http://actor.test:1", 8)
    assert changed.actor.backend == s.actor.backend and (s.seed, s.actor.url) == (0, "http://127.0.0.1:8102")
    changed.security.allowed_hosts.append("x")  # a deep copy: the original's lists are its own
    assert s.security.allowed_hosts == []
    with pytest.raises(ValueError, match="no field 'actor_url'"):
        s.replace(actor_url="http://actor.test:1")
    with pytest.raises(ValueError, match="group 'actor' has no field actor_url"):
        s.replace(actor={"actor_url": "http://actor.test:1"})


def test_defaults_live_under_home(tmp_path) -> None:
    s = Settings(home=tmp_path, _env_file=None)
    assert s.database.url == f"sqlite:///{(tmp_path / 'webrl.db').as_posix()}"
    assert s.artifacts_dir == tmp_path / "artifacts"
    assert s.eager is True
    assert s.site_url("reddit") == f"http://127.0.0.1:{SANDBOX_PORTS['reddit']}"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("WEBRL_HOME", str(tmp_path))
    monkeypatch.setenv("WEBRL_JOBS__BROKER_URL", "redis://127.0.0.1:6379/3")
    monkeypatch.setenv("WEBRL_SITES__GITLAB_URL", "http://gitlab.internal:8023/")
    monkeypatch.setenv("WEBRL_SECURITY__ALLOWED_HOSTS", "a.example:80, b.example")
    get_settings.cache_clear()
    s = get_settings()
    try:
        assert s.eager is False
        assert s.jobs.result_backend == s.jobs.redis_url == "redis://127.0.0.1:6379/3"
        assert s.site_url("gitlab") == "http://gitlab.internal:8023"
        assert s.host_allow_list() == ["a.example:80", "b.example"]
    finally:
        get_settings.cache_clear()


def test_allow_list_defaults_to_the_site_hosts(tmp_path) -> None:
    """Exactly the sites that exist: configured URLs and the served sandbox sites, no port nothing serves."""
    from webrl.sandbox.sites import SITES

    assert set(SANDBOX_SITES) == set(SITES)
    s = Settings(home=tmp_path, sites={"reddit_url": "http://forum.test:9999"}, _env_file=None)
    assert s.host_allow_list() == sorted(["forum.test:9999", *(f"127.0.0.1:{SANDBOX_PORTS[site]}"
                                                                for site in ("shopping", "shopping_admin", "gitlab"))])
    with_map = Settings(home=tmp_path, sites={"map_url": "http://map.test:3000"}, _env_file=None)
    assert "map.test:3000" in with_map.host_allow_list()
    assert f"127.0.0.1:{SANDBOX_PORTS['wikipedia']}" not in with_map.host_allow_list()
    # a site URL without a port is its scheme's default port, not every port of the host
    from webrl.safety.allow_list import is_allowed

    portless = Settings(home=tmp_path, sites={"gitlab_url": "https://GitLab.example.com", "reddit_url":
                                              "http://[::1]/forum"}, _env_file=None)
    hosts = portless.host_allow_list()
    assert "gitlab.example.com:443" in hosts and "[::1]:80" in hosts and "gitlab.example.com" not in hosts
    assert is_allowed("https://gitlab.example.com/explore", hosts) and is_allowed("http://[::1]/forum/f/1", hosts)
    assert not is_allowed("http://gitlab.example.com:6379/", hosts) and not is_allowed("http://[::1]:22/", hosts)


def test_bad_values_are_rejected_naming_the_field(tmp_path) -> None:
    with pytest.raises(ValidationError, match="dtype"):
        Settings(home=tmp_path, models={"dtype": "float8"}, _env_file=None)
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
    assert through_actor(jobs={"broker_url": "redis://127.0.0.1:6379/3"})
    assert not through_actor(jobs={"broker_url": "redis://127.0.0.1:6379/3"}, actor={"rollout_policy": "checkpoint"})
    assert through_actor(actor={"rollout_policy": "endpoint"})
    with pytest.raises(ValidationError, match="rollout_policy"):
        Settings(home=tmp_path, _env_file=None, actor={"rollout_policy": "vllm"})


@pytest.mark.slow  # loads the task suite and imports torch
def test_cli_train_stops_in_one_line_when_the_actor_service_cannot_serve(
        free_sites: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    from webrl.cli import app
    from webrl.models.tiny import build_tiny_folder

    actor = build_tiny_folder(["Show me the products", 'do(action="Click", element="3")'] * 10,
                              free_sites.home / "actor", size="test", vocab_size=600)
    monkeypatch.setenv("WEBRL_ACTOR__ROLLOUT_POLICY", "endpoint")
    monkeypatch.setenv("WEBRL_ACTOR__URL", "http://127.0.0.1:9")  # nothing listens there
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["train", "--preset", "smoke", "--actor", str(actor)])
    assert result.exit_code == 1, result.output
    *_, last = result.output.splitlines()  # after "loaded the sandbox task suite" on a fresh database
    assert last.startswith("error: cannot ask the actor service what it serves (GET http://127.0.0.1:9/v1/model, "
                           "WEBRL_ACTOR__URL)")
    assert "Traceback" not in result.output
