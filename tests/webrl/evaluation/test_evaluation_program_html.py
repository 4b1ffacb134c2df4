"""program_html in real Chromium against local pages: every locator form and check, passing and failing,
the agent's page left where it was, and site-specific helpers failing clearly when called."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import BrowserContext, Page

from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.evaluation import EvaluationError, UnsupportedHelperError, build_evaluator

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="session")]


def html_task(targets: list[dict[str, Any]], eval_types: tuple[str, ...] = ("program_html",),
              reference_url: str = "") -> TaskConfig:
    block = {"eval_types": list(eval_types), "reference_answers": None, "reference_url": reference_url,
             "program_html": targets, "url_note": "GOLD in PRED"}
    return TaskConfig.from_json({"task_id": 7, "sites": ["shopping"], "intent": "Check the order status",
                                 "start_url": "__SHOPPING__", "eval": block})


def target(url: str, locator: str, contents: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"url": url, "locator": locator, "required_contents": contents, **extra}


async def agent_at(context: BrowserContext, url: str) -> Page:
    page = await context.new_page()
    await page.goto(url)
    return page


async def score(config: TaskConfig, settings: Settings, context: BrowserContext, page_url: str,
                agent_page: Page | None = None) -> float:
    return await build_evaluator(config, settings).score("", page_url, context, agent_page)


async def test_fixed_url_js_locator_exact_match(eval_settings: Settings, context: BrowserContext) -> None:
    locator = "document.querySelector('.status').outerText"
    good = html_task([target("__SHOPPING__/order/view/5/", locator, {"exact_match": "canceled"})])
    bad = html_task([target("__SHOPPING__/order/view/5/", locator, {"exact_match": "Complete"})])
    assert await score(good, eval_settings, context, "about:blank") == 1.0
    assert await score(bad, eval_settings, context, "about:blank") == 0.0


async def test_page_content_must_include_and_exclude(eval_settings: Settings, context: BrowserContext) -> None:
    url = "__SHOPPING__/form"
    include = html_task([target(url, "", {"must_include": ["Fish & Chips", "Contact |OR| About"]})])
    missing = html_task([target(url, "", {"must_include": ["Fish & Chips", "Checkout |OR| About"]})])
    exclude_ok = html_task([target(url, "", {"must_exclude": ["Refund"]})])
    exclude_bad = html_task([target(url, "", {"must_exclude": ["Chips"]})])
    assert await score(include, eval_settings, context, "about:blank") == 1.0  # &amp; unescaped
    assert await score(missing, eval_settings, context, "about:blank") == 0.0
    assert await score(exclude_ok, eval_settings, context, "about:blank") == 1.0
    assert await score(exclude_bad, eval_settings, context, "about:blank") == 0.0


async def test_last_reads_the_live_agent_page_without_moving_it(
    eval_settings: Settings, context: BrowserContext
) -> None:
    form_url = f"{eval_settings.sites.shopping_url}/form"
    agent = await agent_at(context, form_url)
    await agent.fill("[name='title']", "Refund for order 5")  # typed, never submitted
    config = html_task([
        target("last", "document.querySelector('[name=\"title\"]').value", {"must_include": ["order 5"]}),
        target("__SHOPPING__/order/view/5/", "document.querySelector('.status').outerText",
               {"exact_match": "Canceled"}),
    ])
    opened: list[Page] = []
    context.on("page", lambda page: opened.append(page))
    # The page is found in the context by its url, and also when handed over explicitly.
    assert await score(config, eval_settings, context, form_url) == 1.0
    assert len(opened) == 1 and opened[0] is not agent and opened[0].is_closed()  # its own page, for target 2
    assert await score(config, eval_settings, context, form_url, agent_page=agent) == 1.0
    assert agent.url == form_url
    assert await agent.input_value("[name='title']") == "Refund for order 5"
    assert context.pages == [agent]  # the evaluator's own page is closed again
    await agent.fill("[name='title']", "something else")
    assert await score(config, eval_settings, context, form_url) == 0.0


async def test_last_without_agent_page_opens_its_own(eval_settings: Settings, context: BrowserContext) -> None:
    page_url = f"{eval_settings.sites.shopping_url}/order/view/5/"
    config = html_task([target("last", "", {"must_include": ["$27.00"]})])
    assert await score(config, eval_settings, context, page_url) == 1.0
    assert context.pages == []
    other = html_task([target("last", "", {"must_include": ["$99.00"]})])
    assert await score(other, eval_settings, context, page_url) == 0.0


async def test_prep_actions_run_before_the_locator(eval_settings: Settings, context: BrowserContext) -> None:
    click = "document.querySelector('[data-index=\"actions\"]').querySelector('.admin__collapsible-title').click()"
    locator = "document.querySelector('[name=\"discount_amount\"').value"
    with_prep = html_task([target("__SHOPPING_ADMIN__/admin/rule", locator, {"exact_match": "20"},
                                  prep_actions=[click])])
    without_prep = html_task([target("__SHOPPING_ADMIN__/admin/rule", locator, {"exact_match": "20"})])
    assert await score(with_prep, eval_settings, context, "about:blank") == 1.0
    assert await score(without_prep, eval_settings, context, "about:blank") == 0.0


async def test_js_values_read_as_python_str(eval_settings: Settings, context: BrowserContext) -> None:
    checked = html_task([target("__SHOPPING__/form", "document.querySelectorAll('input').length === 1",
                                {"exact_match": "true"})])
    broken = html_task([target("__SHOPPING__/form", "document.querySelector('#nope').value",
                               {"must_include": ["x"]})])
    assert await score(checked, eval_settings, context, "about:blank") == 1.0
    assert await score(broken, eval_settings, context, "about:blank") == 0.0  # error reads as ""


async def test_lambda_locator_is_page_javascript(eval_settings: Settings, context: BrowserContext) -> None:
    found = html_task([target("__SHOPPING__/order/view/5/",
                              "lambda:(() => document.querySelector('h1').textContent)()",
                              {"must_include": ["Order # 5"]})])
    falsy = html_task([target("__SHOPPING__/order/view/5/", "lambda:(() => document.querySelector('#none'))()",
                              {"must_exclude": ["anything"]})])
    assert await score(found, eval_settings, context, "about:blank") == 1.0
    assert await score(falsy, eval_settings, context, "about:blank") == 0.0  # nothing found: the page is wrong


async def test_func_url_reddit_post_from_last_url(eval_settings: Settings, context: BrowserContext) -> None:
    comment_url = f"{eval_settings.sites.reddit_url}/f/books/12/best-fantasy/comment/3"
    agent = await agent_at(context, comment_url)
    links = ("[...document.querySelector('.submission__inner').querySelectorAll('[href],[src]')]"
             ".map(elem => elem.getAttribute('href') || elem.getAttribute('src')).join(' ')")
    good = html_task([target("func:reddit_get_post_url('__last_url__')", links,
                             {"must_include": ["https://example.org/dune"]})])
    bad = html_task([target("func:reddit_get_post_url('__last_url__')", links,
                            {"must_include": ["https://example.org/lotr"]})])
    assert await score(good, eval_settings, context, comment_url) == 1.0
    assert await score(bad, eval_settings, context, comment_url) == 0.0
    assert agent.url == comment_url and context.pages == [agent]


async def test_func_locators_read_the_page(eval_settings: Settings, context: BrowserContext) -> None:
    url = "__GITLAB__/gitlab/members"
    role = html_task([target(url, "func:gitlab_get_project_memeber_role(__page__, 'vinta')",
                             {"must_include": ["Maintainer"]})])
    absent = html_task([target(url, "func:gitlab_get_project_memeber_role(__page__, 'nobody')",
                               {"must_include": ["Developer"]})])
    text = html_task([target("__SHOPPING__/form", "func:get_query_text_lowercase(__page__, '#greeting')",
                             {"exact_match": "fish & chips"})])
    assert await score(role, eval_settings, context, "about:blank") == 1.0
    assert await score(absent, eval_settings, context, "about:blank") == 0.0
    assert await score(text, eval_settings, context, "about:blank") == 1.0


async def test_site_helpers_build_but_raise_when_called(eval_settings: Settings, context: BrowserContext) -> None:
    config = html_task([target("func:shopping_get_latest_order_url()", "", {"must_include": ["x"]})])
    evaluator = build_evaluator(config, eval_settings)
    with pytest.raises(UnsupportedHelperError, match="shopping_get_latest_order_url") as info:
        await evaluator.score("", "about:blank", context)
    assert info.value.name == "shopping_get_latest_order_url"
    assert context.pages == []


async def test_url_and_html_scores_multiply(eval_settings: Settings, context: BrowserContext) -> None:
    order_url = f"{eval_settings.sites.shopping_url}/order/view/5/"
    config = html_task([target("last", "", {"must_include": ["Canceled"]})], ("url_match", "program_html"),
                       reference_url="__SHOPPING__/order/view/5/")
    assert await score(config, eval_settings, context, order_url) == 1.0
    wrong_page = f"{eval_settings.sites.shopping_url}/form"
    result = await build_evaluator(config, eval_settings).evaluate("", wrong_page, context)
    assert result.score == 0.0 and result.parts == {"url_match": 0.0}


async def test_program_html_fuzzy_match(judge_settings: Settings, context: BrowserContext) -> None:
    locator = "document.querySelector('.status').outerText"
    good = html_task([target("__SHOPPING__/order/view/5/", locator, {"fuzzy_match": ["canceled"]})])
    bad = html_task([target("__SHOPPING__/order/view/5/", locator, {"fuzzy_match": ["shipped"]})])
    assert await score(good, judge_settings, context, "about:blank") == 1.0
    assert await score(bad, judge_settings, context, "about:blank") == 0.0


async def test_unreachable_page_is_an_error(eval_settings: Settings, context: BrowserContext) -> None:
    config = html_task([target("http://127.0.0.1:9/nowhere", "", {"must_include": ["x"]})])
    settings = eval_settings.replace(security={"allowed_hosts": [*eval_settings.host_allow_list(), "127.0.0.1:9"]})
    with pytest.raises(EvaluationError, match="could not open"):
        await score(config, settings, context, "about:blank")


async def test_no_page_off_the_allow_list_is_opened(eval_settings: Settings, context: BrowserContext,
                                                    outside_site: Any) -> None:
    """Neither a target on an unlisted host nor a redirect to one (the request never leaves the browser);
    the control: with that host listed, the same redirect is followed and the check passes."""
    locator = "document.querySelector('#greeting').outerText"
    direct = html_task([target(f"{outside_site.url}/form", locator, {"exact_match": "Fish & Chips"})])
    redirected = html_task([target(f"__SHOPPING__/away?to={outside_site.url}/form", locator,
                                   {"exact_match": "Fish & Chips"})])
    outside_site.paths.clear()
    with pytest.raises(EvaluationError, match="not on the allow-list"):
        await score(direct, eval_settings, context, "about:blank")
    with pytest.raises(EvaluationError, match=re.escape(f"redirected to {outside_site.url}/form, whose")):
        await score(redirected, eval_settings, context, "about:blank")
    assert outside_site.paths == []
    listed = [*eval_settings.host_allow_list(), outside_site.url.split("//", 1)[1]]
    assert await score(redirected, eval_settings.replace(security={"allowed_hosts": listed}), context,
                       "about:blank") == 1.0
    assert "/form" in outside_site.paths
