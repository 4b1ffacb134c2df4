"""TaskConfig loads every real WebArena config and writes it back unchanged."""

from __future__ import annotations

import json

import pytest

from webrl.agent.schemas import TaskConfig, TaskFileError, load_task_file, resolve_placeholders
from webrl.config import Settings


def test_all_webarena_configs_round_trip(webarena_configs: list[dict]) -> None:
    assert len(webarena_configs) == 977
    for raw in webarena_configs:
        cfg = TaskConfig.from_json(raw)
        assert cfg.to_json() == raw, raw["task_id"]
        assert json.loads(json.dumps(cfg.to_json())) == raw


def test_unknown_fields_are_kept() -> None:
    raw = {"task_id": 1, "sites": ["reddit"], "intent": "x", "start_url": "__REDDIT__", "my_field": [1, 2]}
    assert TaskConfig.from_json(raw).to_json() == raw


def test_placeholders_resolve_from_settings() -> None:
    s = Settings(sites={"shopping_admin_url": "http://admin.example:7780/admin"}, _env_file=None)
    text = "__SHOPPING_ADMIN__/sales |AND| __SHOPPING__/cart"
    out = resolve_placeholders(text, s)
    assert out == f"http://admin.example:7780/admin/sales |AND| {s.site_url('shopping')}/cart"
    cfg = TaskConfig.from_json({"task_id": 3, "sites": ["shopping"], "intent": "i", "start_url": text})
    assert cfg.start_urls(s) == ["http://admin.example:7780/admin/sales", f"{s.site_url('shopping')}/cart"]


def test_load_task_file_reads_lists_and_single_configs(tmp_path) -> None:
    one = {"task_id": 7, "sites": ["gitlab"], "intent": "a", "start_url": "__GITLAB__"}
    (tmp_path / "one.json").write_text(json.dumps(one))
    (tmp_path / "many.json").write_text(json.dumps([one, {**one, "task_id": 8}]))
    assert [t.task_id for t in load_task_file(tmp_path / "one.json")] == [7]
    assert [t.task_id for t in load_task_file(tmp_path / "many.json")] == [7, 8]


def test_load_task_file_refuses_repeated_task_ids_naming_them(tmp_path) -> None:
    """A task is stored under ``<prefix>/<task_id>``: a repeated id (7 and "7" too) would keep only one config."""
    one = {"task_id": 7, "sites": ["gitlab"], "intent": "a", "start_url": "__GITLAB__"}
    path = tmp_path / "repeated.json"
    path.write_text(json.dumps([one, {**one, "task_id": 8, "intent": "b"}, {**one, "task_id": "7", "intent": "c"}]))
    with pytest.raises(TaskFileError, match=r"repeated\.json: 1 task id\(s\) repeated \(task_id 7 in entries 0, 2\)"):
        load_task_file(path)
