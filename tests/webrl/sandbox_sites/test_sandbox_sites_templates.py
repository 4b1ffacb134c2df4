"""Task templates of the reddit and gitlab sites: WebArena's JSON format, enough tasks, every kind, valid
eval blocks, no hidden answer leaking into the task, deterministic instantiation."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from webrl.config import SITE_PLACEHOLDERS, Settings
from webrl.evaluation import build_evaluator
from webrl.sandbox.sites.gitlab.templates_tasks import TEMPLATES as GITLAB
from webrl.sandbox.sites.reddit.templates_tasks import TEMPLATES as REDDIT
from webrl.sandbox.tasks.base import Template

ALL = REDDIT + GITLAB
ID_RANGES = {"reddit": range(300, 400), "gitlab": range(400, 500)}  # tasks/base.py convention
WEBARENA_KEYS = {"sites", "task_id", "require_login", "storage_state", "start_url", "geolocation",
                 "intent_template", "instantiation_dict", "intent", "require_reset", "eval", "intent_template_id"}


def test_ids_kinds_and_counts(site_data) -> None:
    assert len(ALL) >= 20 and len({t.id for t in ALL}) == len(ALL)
    for t in ALL:
        assert t.id in ID_RANGES[t.site], t.id
    for site in ID_RANGES:
        assert {t.kind for t in ALL if t.site == site} == {"info", "nav", "mutate"}
    total = sum(len(t.instantiate(site_data, random.Random(t.id))) for t in ALL)
    assert total >= 400, total
    answers = Counter(k for t in ALL if t.kind == "info" for inst in t.instantiate(site_data, random.Random(0))[:1]
                      for k in t.config(0, inst, site_data).eval.reference_answers)
    assert answers["exact_match"] and answers["must_include"]


@pytest.mark.parametrize("template", ALL, ids=lambda t: str(t.id))
def test_configs_are_webarena_tasks(template: Template, site_data, tmp_path) -> None:
    settings = Settings(home=tmp_path)
    instances = template.instantiate(site_data, random.Random(template.id))
    assert len(instances) >= 10, f"template {template.id} has only {len(instances)} instantiations"
    assert instances == template.instantiate(site_data, random.Random(template.id))  # deterministic
    placeholder = SITE_PLACEHOLDERS[template.site]
    for i, inst in enumerate(instances):
        config = template.config(f"t{i}", inst, site_data)
        data = config.to_json()
        assert set(data) == WEBARENA_KEYS
        assert config.start_url.startswith(placeholder) and "{" not in config.start_url
        assert "{{" not in config.intent and set(config.instantiation_dict) == set(template.slots())
        assert config.require_login and config.storage_state == f"./.auth/{template.site}_state.json"
        assert config.require_reset == (template.kind == "mutate")
        kinds = {"info": ["string_match"], "nav": ["url_match"], "mutate": ["program_html"]}
        assert config.eval.eval_types == kinds[template.kind]
        for check in config.eval.program_html:
            assert check["url"].startswith(placeholder) and check["locator"].startswith("document.")
        if config.eval.reference_url:
            assert config.eval.reference_url.startswith(placeholder)
        build_evaluator(config, settings)  # every block is one the evaluator supports
