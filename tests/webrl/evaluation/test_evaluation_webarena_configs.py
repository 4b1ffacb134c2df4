"""Every eval block of the 977 WebArena and WebArena-Lite test configs builds into an evaluator."""

from __future__ import annotations

from collections import Counter

import pytest

from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.evaluation import UnsupportedHelperError, build_evaluator
from webrl.evaluation.helpers import HELPERS, HelperContext
from webrl.evaluation.program_html import ProgramHtml

WEBARENA_TASKS = 812 + 165  # WebArena test + WebArena-Lite test


def test_every_webarena_eval_block_builds(webarena_configs: list[dict], eval_settings: Settings) -> None:
    assert len(webarena_configs) == WEBARENA_TASKS
    kinds: Counter[str] = Counter()
    for raw in webarena_configs:
        evaluator = build_evaluator(TaskConfig.from_json(raw), eval_settings)
        assert evaluator.eval_types == raw["eval"]["eval_types"]
        kinds.update(evaluator.eval_types)
    assert kinds == {"string_match": 415, "program_html": 478, "url_match": 244}


async def test_site_specific_helpers_fail_clearly_when_called(
    webarena_configs: list[dict], eval_settings: Settings
) -> None:
    called: Counter[str] = Counter()
    ctx = HelperContext(eval_settings, None, None)
    for raw in webarena_configs:
        for part in build_evaluator(TaskConfig.from_json(raw), eval_settings).parts:
            if not isinstance(part, ProgramHtml):
                continue
            for target in part.targets:
                for call in (target.url, target.locator.call):
                    if call is None or isinstance(call, str) or call.name in HELPERS:
                        continue
                    with pytest.raises(UnsupportedHelperError, match=call.name):
                        await call.call(ctx, last_url="")
                    called[call.name] += 1
    assert set(called) == {
        "shopping_get_latest_order_url",
        "shopping_get_sku_latest_review_author",
        "shopping_get_sku_latest_review_rating",
    }
