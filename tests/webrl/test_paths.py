"""Paths in requests stay inside the artifacts store (webrl.serving.paths)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webrl.config import Settings
from webrl.serving.paths import confined_path, requested_model_folder
from webrl.wire.contracts import InvalidRequest


@pytest.fixture
def store(tmp_path: Path) -> Settings:
    settings = Settings(home=tmp_path / "home", database={"url": "sqlite://"},
                        security={"model_dirs": []})  # not the session's
    settings.ensure_dirs()
    return settings


def test_relative_and_absolute_paths_inside_the_store_resolve_there(store: Settings) -> None:
    root = Path(store.artifacts_dir).resolve()
    assert confined_path(store, "models/actor", "output") == root / "models" / "actor"
    state = confined_path(store, "./.auth/shopping_state.json", "storage_state")
    assert state == root / ".auth" / "shopping_state.json"
    assert confined_path(store, str(root / "a" / ".." / "b"), "output") == root / "b"


@pytest.mark.parametrize("value", ["../outside", "models/../../outside", "/etc", "/tmp/x", "", " ", ".", "a\x00b",
                                   "~no-such-user-webrl/x"])
def test_paths_that_leave_the_store_are_refused_naming_the_field(store: Settings, value: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        confined_path(store, value, "actor_output")
    assert refused.value.field == "actor_output" and str(refused.value).startswith("actor_output: ")


def test_a_symlink_out_of_the_store_is_refused(store: Settings, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (Path(store.artifacts_dir) / "link").symlink_to(outside)
    with pytest.raises(InvalidRequest, match="outside the artifacts store"):
        confined_path(store, "link/model", "output")


def test_a_requested_model_folder_must_be_in_the_store_a_model_dir_or_the_configured_model(
        store: Settings, tmp_path: Path) -> None:
    inside = Path(store.artifacts_dir) / "models" / "orm"
    inside.mkdir(parents=True)
    (inside / "config.json").write_text("{}")
    assert requested_model_folder(store, str(inside), "orm") == inside.resolve()
    released = tmp_path / "released" / "webrl-orm"
    released.mkdir(parents=True)
    (released / "adapter_config.json").write_text("{}")  # an adapter folder is a model folder too
    with pytest.raises(InvalidRequest, match="WEBRL_SECURITY__MODEL_DIRS") as refused:
        requested_model_folder(store, str(released), "orm")
    assert refused.value.field == "orm"
    assert requested_model_folder(store, str(released), "orm", configured=str(released)) == released.resolve()
    store.security.model_dirs = [str(tmp_path / "released")]
    assert requested_model_folder(store, str(released), "orm") == released.resolve()


def test_a_requested_folder_that_holds_no_model_is_refused_unless_it_is_the_configured_model(
        store: Settings, tmp_path: Path) -> None:
    empty = Path(store.artifacts_dir) / "models"
    empty.mkdir(parents=True)  # the models folder itself, say: loading it would fail inside transformers
    with pytest.raises(InvalidRequest, match="not a model folder") as refused:
        requested_model_folder(store, str(empty), "actor")
    assert refused.value.field == "actor"
    # the operator's configured model is loaded as configured, whatever it holds
    assert requested_model_folder(store, str(empty), "actor", configured=[None, str(empty)]) == empty.resolve()


@pytest.mark.parametrize("value", ["/etc", "/", "<a>" * 2000, "a\x00b", "", "models/../../.."])
def test_requested_model_folders_outside_or_unusable_are_a_field_error(store: Settings, value: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        requested_model_folder(store, value, "critic")
    assert refused.value.field == "critic"


def test_a_missing_folder_inside_the_store_is_named(store: Settings) -> None:
    with pytest.raises(InvalidRequest, match="no model folder"):
        requested_model_folder(store, str(Path(store.artifacts_dir) / "models" / "absent"), "orm")


def test_model_dirs_come_comma_separated_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBRL_SECURITY__MODEL_DIRS", "/models/a, /models/b")
    assert Settings().security.model_dirs == ["/models/a", "/models/b"]


def test_a_model_folder_in_an_unknown_users_home_is_refused_naming_the_field(store: Settings) -> None:
    with pytest.raises(InvalidRequest) as refused:  # found by the API fuzz test: was a 500
        requested_model_folder(store, "~no-such-user-webrl/orm", "orm")
    assert refused.value.field == "orm" and "unknown user" in str(refused.value)
