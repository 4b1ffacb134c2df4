"""string_match and url_match through build_evaluator: passing and failing cases, the LLM judge over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.evaluation import LLMJudgeNotConfiguredError, build_evaluator
from webrl.evaluation.url_match import url_score


def task(eval_block: dict[str, Any], intent: str = "What is the status of order 5?") -> TaskConfig:
    return TaskConfig.from_json(
        {"task_id": 1, "sites": ["shopping"], "intent": intent, "start_url": "__SHOPPING__", "eval": eval_block}
    )


def string_task(reference_answers: dict[str, Any], string_note: str | None = None) -> TaskConfig:
    block = {"eval_types": ["string_match"], "reference_answers": reference_answers, "reference_url": "",
             "program_html": [], "string_note": string_note}
    return task(block)


async def score(config: TaskConfig, settings: Settings, answer: str | None, url: str = "http://x/") -> float:
    return await build_evaluator(config, settings).score(answer, url, None)


async def test_exact_match(eval_settings: Settings) -> None:
    config = string_task({"exact_match": "Canceled"})
    assert await score(config, eval_settings, ' "Canceled" ') == 1.0
    assert await score(config, eval_settings, "It was canceled") == 0.0
    assert await score(config, eval_settings, None) == 0.0


async def test_must_include_every_phrase_with_or(eval_settings: Settings) -> None:
    config = string_task({"must_include": ["Dune", "Foundation |OR| Hyperion"]})
    assert await score(config, eval_settings, "Dune and Hyperion") == 1.0
    assert await score(config, eval_settings, "Dune and Neuromancer") == 0.0
    single = string_task({"must_include": ["0"]})
    assert await score(single, eval_settings, "0") == 1.0
    assert await score(single, eval_settings, "10") == 0.0


async def test_fuzzy_match_asks_the_configured_judge(judge_settings: Settings, local_site: Any) -> None:
    config = string_task({"fuzzy_match": ["Pittsburgh, PA"]})
    assert await score(config, judge_settings, "It was shipped to pittsburgh (pa)") == 1.0
    assert await score(config, judge_settings, "Boston") == 0.0
    request = local_site.judge_requests[0]
    assert request["body"]["model"] == "judge-test" and request["authorization"] == "Bearer secret"
    assert request["body"]["temperature"] == 0
    assert "What is the status of order 5?" in request["body"]["messages"][-1]["content"]
    assert await score(config, judge_settings, "") == 0.0  # empty answer: no judge call
    assert len(local_site.judge_requests) == 2


async def test_fuzzy_match_without_judge_is_a_clear_error(eval_settings: Settings) -> None:
    config = string_task({"fuzzy_match": ["Pittsburgh"]})
    with pytest.raises(LLMJudgeNotConfiguredError, match="WEBRL_LLM_JUDGE__ENDPOINT"):
        await score(config, eval_settings, "Pittsburgh")


async def test_unachievable_task(judge_settings: Settings, eval_settings: Settings) -> None:
    config = string_task({"fuzzy_match": "N/A"}, string_note="there is no store in Pittsburgh")
    assert await score(config, eval_settings, "N/A") == 1.0  # exact N/A needs no judge
    assert await score(config, judge_settings, "Cannot do it: there is no store in pittsburgh") == 1.0
    assert await score(config, judge_settings, "The answer is 42") == 0.0


async def test_scores_multiply(eval_settings: Settings) -> None:
    block = {"eval_types": ["string_match", "url_match"], "reference_answers": {"must_include": ["5"]},
             "reference_url": "__SHOPPING__/sales/order/view/order_id/5/", "program_html": [], "url_note": None}
    config = task(block)
    good_url = f"{eval_settings.sites.shopping_url}/sales/order/view/order_id/5/"
    evaluator = build_evaluator(config, eval_settings)
    assert evaluator.eval_types == ["string_match", "url_match"]
    assert await evaluator.score("order 5", good_url, None) == 1.0
    other_order = f"{eval_settings.sites.shopping_url}/sales/order/view/order_id/6/"
    result = await evaluator.evaluate("order 5", other_order, None)
    assert result.score == 0.0 and result.parts == {"string_match": 1.0, "url_match": 0.0}
    assert await evaluator.score("order 6", good_url, None) == 0.0


def test_url_gold_in_pred_paths_and_queries() -> None:
    ref = "http://shop/catalogsearch/result/?q=xbox"
    assert url_score("http://shop/catalogsearch/result/?q=xbox&page=2", ref) == 1.0
    assert url_score("http://shop/catalogsearch/result/?q=switch", ref) == 0.0
    assert url_score("http://shop/catalogsearch/other/?q=xbox", ref) == 0.0
    assert url_score("http://shop/a/b/c/", "http://shop/a/b") == 1.0  # reference path inside the prediction
    assert url_score("http://shop/a", "http://shop/a/b") == 0.0


def test_url_or_references_and_query_alternatives() -> None:
    refs = "http://shop/list?sort=price |OR| http://shop/list?sort=name"
    assert url_score("http://shop/list?sort=name", refs) == 1.0
    assert url_score("http://shop/list?sort=date", refs) == 0.0
    assert url_score("http://shop/list", refs) == 0.0  # a reference query key must be present


def test_url_exact_rule() -> None:
    assert url_score("http://shop/list/", "http://shop/list", rule="EXACT") == 1.0
    assert url_score("http://shop/list/page", "http://shop/list", rule="EXACT") == 0.0


async def test_url_placeholders_resolve_to_settings(eval_settings: Settings) -> None:
    block = {"eval_types": ["url_match"], "reference_url": "__GITLAB__/dashboard/todos", "url_note": "GOLD in PRED",
             "program_html": []}
    config = task(block)
    assert await score(config, eval_settings, None, f"{eval_settings.sites.gitlab_url}/dashboard/todos/") == 1.0
    assert await score(config, eval_settings, None, "http://elsewhere:1/dashboard/todos") == 0.0
