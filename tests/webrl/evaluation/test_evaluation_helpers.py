"""func: expressions are parsed, never eval'd: only calls of known helpers with literal arguments."""

from __future__ import annotations

import pytest

from webrl.config import Settings
from webrl.evaluation import EvaluatorBuildError, UnsupportedHelperError
from webrl.evaluation.helpers import PAGE, HelperCall, HelperContext, reddit_get_post_url


def test_parse_known_helpers() -> None:
    call = HelperCall.parse("func:gitlab_get_project_memeber_role(__page__, 'yjlou')")
    assert call.name == "gitlab_get_project_memeber_role" and call.args == (PAGE, "yjlou")
    assert HelperCall.parse("func:reddit_get_post_url('__last_url__')").args == ("__last_url__",)
    assert HelperCall.parse("shopping_get_sku_latest_review_rating('B00J8RZL7I')").args == ("B00J8RZL7I",)


@pytest.mark.parametrize(
    "source",
    [
        "func:__import__('os').system('touch /tmp/pwned')",
        "func:os.system('ls')",
        "func:reddit_get_post_url(open('/etc/passwd').read())",
        "func:reddit_get_post_url(url='x')",
        "func:get_query_text(__page__, '#a' + '#b')",
        "func:reddit_get_post_url('a'",
        "func:lambda: 1",
        "func:not_a_helper('x')",
        "func:reddit_get_post_url('a', 'b')",
    ],
)
def test_parse_refuses_everything_else(source: str) -> None:
    with pytest.raises(EvaluatorBuildError, match="func:"):
        HelperCall.parse(source)


def test_reddit_post_url() -> None:
    ctx = HelperContext(Settings(), None, None)
    assert reddit_get_post_url(ctx, "http://h:9999/f/books/12/best/comment/3") == "http://h:9999/f/books/12/"
    assert reddit_get_post_url(ctx, "http://h:9999/forums") == "http://h:9999/forums"
    assert reddit_get_post_url(ctx, "http://h:9999/u/alice/posts") == "http://h:9999/u/alice/posts"


async def test_last_url_substituted_in_arguments() -> None:
    call = HelperCall.parse("func:reddit_get_post_url('__last_url__')")
    ctx = HelperContext(Settings(), None, None)
    assert await call.call(ctx, last_url="http://h/f/a/7/x/comment/1") == "http://h/f/a/7/"


async def test_site_helper_raises_naming_itself() -> None:
    call = HelperCall.parse("func:shopping_get_sku_latest_review_author('B07HZB38XH')")
    with pytest.raises(UnsupportedHelperError, match=r"shopping_get_sku_latest_review_author.*Magento"):
        await call.call(HelperContext(Settings(), None, None), last_url="")
