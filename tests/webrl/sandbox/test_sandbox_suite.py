"""The task suite: sizes, splits, WebArena shape, evaluators that build, the export command."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from webrl.agent.schemas import TaskConfig
from webrl.config import SITE_PLACEHOLDERS, Settings
from webrl.evaluation import build_evaluator
from webrl.sandbox.tasks import suite as suite_module
from webrl.sandbox.tasks.suite import TEST_SIZE, all_templates, build_suite, holdout_ids, load_suite, task_key

WEBARENA_KEYS = {"sites", "task_id", "require_login", "storage_state", "start_url", "geolocation", "intent_template",
                 "instantiation_dict", "intent", "require_reset", "eval", "intent_template_id"}
SHOP_SITES = ("shopping", "shopping_admin")


@pytest.fixture(scope="module")
def suite() -> dict[str, list[TaskConfig]]:
    return build_suite(0)


def test_sizes_and_template_counts(suite: dict[str, list[TaskConfig]]) -> None:
    templates = all_templates()
    assert len(suite["test"]) == TEST_SIZE
    shop_templates = [t for t in templates if t.site in SHOP_SITES]
    assert len(shop_templates) >= 22
    assert {t.kind for t in shop_templates} == {"info", "nav", "mutate"}
    shop_tasks = [c for split in suite.values() for c in split if c.site in SHOP_SITES]
    assert len(shop_tasks) >= 450
    if {"reddit", "gitlab"} <= {t.site for t in templates}:  # the whole issue's bar, once every site is present
        assert len(templates) >= 40
        assert len(suite["train"]) + len(suite["test"]) >= 800


def test_splits_hold_out_templates_and_share_no_intent(suite: dict[str, list[TaskConfig]]) -> None:
    held = holdout_ids(all_templates(), 0)
    train_templates = {c.intent_template_id for c in suite["train"]}
    test_templates = {c.intent_template_id for c in suite["test"]}
    assert len(held) == suite_module.HOLDOUT_TEMPLATES
    assert held <= test_templates and not held & train_templates
    assert test_templates - held, "test also needs new instantiations of train templates"
    assert not {c.intent for c in suite["train"]} & {c.intent for c in suite["test"]}
    for split in suite.values():
        assert len({c.intent for c in split}) == len(split)
        assert [c.task_id for c in split] == list(range(len(split)))


def test_suite_is_deterministic(suite: dict[str, list[TaskConfig]]) -> None:
    suite_module._build.cache_clear()
    again = build_suite(0)
    assert [c.to_json() for c in again["test"]] == [c.to_json() for c in suite["test"]]
    assert [c.to_json() for c in again["train"]] == [c.to_json() for c in suite["train"]]


def test_configs_are_webarena_shaped(suite: dict[str, list[TaskConfig]]) -> None:
    answers: Counter[str] = Counter()
    for config in suite["train"] + suite["test"]:
        data = config.to_json()
        assert WEBARENA_KEYS <= set(data)
        assert config.start_url.startswith(SITE_PLACEHOLDERS[config.site])
        assert "{{" not in config.intent and config.intent_template and "{{" in config.intent_template
        assert not any(k.startswith("_") for k in config.instantiation_dict or {})
        assert config.eval is not None
        for kind in config.eval.eval_types:
            answers[kind] += 1
        for key in (config.eval.reference_answers or {}):
            answers[key] += 1
        for check in config.eval.program_html:
            assert check["url"] == "last" or check["url"].startswith("__")
            assert check["locator"].startswith("document.")
            answers["program_html"] += 1
        assert config.require_login == (config.storage_state is not None)
    assert {"string_match", "url_match", "program_html", "exact_match", "must_include"} <= set(answers)


def test_every_eval_block_builds_an_evaluator(suite: dict[str, list[TaskConfig]], settings: Settings) -> None:
    for config in suite["train"] + suite["test"]:
        build_evaluator(config.resolved(settings), settings)


def test_export_writes_a_webarena_json_list(tmp_path: Path, settings: Settings) -> None:
    from webrl.cli import app

    out = tmp_path / "test.raw.json"
    result = CliRunner().invoke(app, ["tasks", "export", "--split", "test", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert isinstance(data, list) and len(data) == TEST_SIZE
    assert all(WEBARENA_KEYS <= set(item) for item in data)
    bad = CliRunner().invoke(app, ["tasks", "export", "--split", "dev"])
    assert bad.exit_code != 0 and "split must be one of" in bad.output


def test_export_keys_match_webarena_files(webarena_configs: list[dict]) -> None:
    ours = build_suite(0)["test"][0].to_json()
    theirs = webarena_configs[0]
    assert set(theirs) - {"intent_template_id", "old_task_id"} <= set(ours)  # old_task_id: WebArena-Lite only
    assert set(theirs["eval"]) <= set(ours["eval"]) | {"string_note", "url_note", "reference_answer_raw_annotation"}


def test_load_upserts_both_splits_idempotently(settings: Settings) -> None:
    from webrl.db.migrate import upgrade
    from webrl.db.repository import tasks_where
    from webrl.db.session import session_scope

    upgrade(settings)
    assert load_suite(settings, 0) == load_suite(settings, 0)
    with session_scope(settings) as session:
        test_rows = tasks_where(session, split="test")
        assert len(test_rows) == TEST_SIZE and {r.origin for r in test_rows} == {"test"}
        assert {r.origin for r in tasks_where(session, split="train")} == {"seed"}
        assert test_rows[0].key == task_key("test", TaskConfig.from_json(test_rows[0].config))
