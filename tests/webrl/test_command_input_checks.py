"""The up-front checks of the command line's inputs (``webrl.commands``): a model folder whose JSON files its content
sha256 cannot read, an output place that cannot be written, a task file no episode could start from, and the flag a
refused hyperparameter record names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer

from webrl.commands import check_model_folder, check_output_file, check_output_folder, unwritable_place
from webrl.commands.train import check_task_file, flag_at_fault
from webrl.config import Settings
from webrl.store.checkpoints import content_sha256, malformed_json_file

TINY_ACTOR = Path(__file__).resolve().parents[2] / "webrl" / "assets" / "actor-sft"


def test_a_malformed_json_file_of_a_model_folder_is_named_before_its_identity_is_needed(tmp_path: Path) -> None:
    folder = tmp_path / "actor"
    shutil.copytree(TINY_ACTOR, folder)
    assert malformed_json_file(folder) is None and check_model_folder(folder, "--actor") == folder
    (folder / "tokenizer_config.json").write_text("{not json")
    problem = malformed_json_file(folder)
    assert problem is not None and str(folder / "tokenizer_config.json") in problem and "is not JSON" in problem
    with pytest.raises(typer.BadParameter) as refused:
        check_model_folder(folder, "--actor")
    assert refused.value.param_hint == "--actor" and "tokenizer_config.json is not JSON" in str(refused.value)
    with pytest.raises(ValueError, match=r"tokenizer_config\.json is not JSON"):  # not a bare JSONDecodeError
        content_sha256(folder)


def test_an_output_place_under_a_file_or_that_is_the_wrong_kind_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("kept")
    assert unwritable_place(tmp_path / "new" / "deeper" / "x.json") is None
    assert unwritable_place(a_file / "x.json") == f"{a_file} is a file, so {a_file / 'x.json'} cannot be written"
    cases = [(check_output_file, a_file / "x.json", "is a file, so"), (check_output_file, tmp_path, "is a folder"),
             (check_output_folder, a_file, "is a file; name a folder"),
             (check_output_folder, a_file / "reports", "is a file, so")]
    for check, place, problem in cases:
        with pytest.raises(typer.BadParameter, match=problem):
            check(place, "--out")
    assert check_output_file(tmp_path / "new" / "x.json", "--out") == tmp_path / "new" / "x.json"
    assert check_output_folder(tmp_path / "reports", "--out") == tmp_path / "reports"
    assert a_file.read_text() == "kept"


def _tasks(path: Path, *start_urls: str) -> Path:
    path.write_text(json.dumps([{"task_id": i, "sites": ["shopping"], "intent": "Buy a mug", "start_url": url}
                                for i, url in enumerate(start_urls)]))
    return path


def test_a_task_file_is_refused_up_front_naming_the_entry_and_url(settings: Settings, tmp_path: Path) -> None:
    check_task_file(settings, _tasks(tmp_path / "ok.json", "__SHOPPING__/", "__SHOPPING__/cart |AND| __REDDIT__/"))
    cases = [(("__SHOPPING__/", "http://example.com/shop"), "entry 1 (task_id 1): host example.com is not on the "
              "allow-list"),
             (("__SHOPPING__/ |AND| file:///etc/passwd",), "entry 0 (task_id 0): 'file:///etc/passwd' is not an "
              "http(s) URL"),
             ((), "holds no task configs")]
    for urls, problem in cases:
        with pytest.raises(typer.BadParameter) as refused:
            check_task_file(settings, _tasks(tmp_path / "tasks.json", *urls))
        assert refused.value.param_hint == "--tasks" and problem in str(refused.value), str(refused.value)
        assert all(url in str(refused.value) for url in urls if "__" not in url)


def test_a_refused_record_names_the_flag_that_gave_the_value() -> None:
    flags = {"curriculum.tasks_per_phase": "--tasks-per-phase", "actor.lr": "--actor-lr",
             "rollout.max_attempts": "--max-attempts"}
    assert flag_at_fault("actor.lr", "actor.lr: must be > 0", flags) == "--actor-lr"
    assert flag_at_fault("curriculum", "curriculum.candidates_per_phase 96 is below tasks_per_phase 100",
                         flags) == "--tasks-per-phase"
    assert flag_at_fault("", "rollout.max_attempts 9 at curriculum.tasks_per_phase 48", flags) == "--max-attempts"
    assert flag_at_fault("", "the learning rate is already too small", flags) is None  # "lr" only inside words
