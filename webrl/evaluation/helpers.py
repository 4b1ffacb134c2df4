"""``func:`` helpers of WebArena's ``program_html`` blocks, parsed safely and called by name.

A config writes a helper call as Python source, e.g. ``func:reddit_get_post_url('__last_url__')`` (as a
target url) or ``func:gitlab_get_project_memeber_role(__page__, 'yjlou')`` (as a locator). WebArena runs
it with ``eval``; here the text is parsed with :mod:`ast` and only one shape is accepted: a call of a
known helper name whose arguments are literals or the name ``__page__`` (the page being checked). Nothing
is ever passed to ``eval``.

Helpers that read only the page or the url are implemented here. Helpers that call WebArena's own site
(its Magento REST API with the admin account, or its exact page markup) are known by name so every config
builds, and raise :class:`UnsupportedHelperError` when called, unless an implementation has been
registered with :func:`register_helper` (for instance by a deployment that has those sites).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from playwright.async_api import BrowserContext, Page

from webrl.config import Settings
from webrl.evaluation.harness_errors import EvaluationError, EvaluatorBuildError, UnsupportedHelperError

#: The names WebArena's configs use for "the page being checked" (it rewrites ``__page__`` to ``page``).
PAGE_NAMES = frozenset({"__page__", "page"})
#: Replaced, inside string arguments, by the url of the page being checked (WebArena's ``__last_url__``).
LAST_URL = "__last_url__"

_MAGENTO_API = "WebArena's Magento REST API (the shopping site's admin integration token)"
_MAGENTO_PAGE = "the page markup of WebArena's Magento shopping site"
_POSTMILL_PAGE = "the page markup of WebArena's Postmill forum (reddit)"

#: Helpers that need WebArena's own sites, with what they need. Known so that their configs build.
SITE_HELPERS: dict[str, str] = {
    # WebArena (evaluation_harness/helper_functions.py)
    "shopping_get_latest_order_url": _MAGENTO_API,
    "shopping_get_sku_latest_review_author": _MAGENTO_API,
    "shopping_get_sku_latest_review_rating": _MAGENTO_API,
    # VisualWebArena / WebArena-Lite (helper_functions_eval.py)
    "shopping_get_auth_token": _MAGENTO_API,
    "shopping_get_sku_latest_review_text": _MAGENTO_API,
    "shopping_get_sku_latest_review_title": _MAGENTO_API,
    "shopping_get_sku_product_page_url": _MAGENTO_API,
    "shopping_get_all_product_order": _MAGENTO_PAGE,
    "shopping_get_order_product_name_list": _MAGENTO_PAGE,
    "shopping_get_order_product_quantity": _MAGENTO_PAGE,
    "shopping_get_order_product_option": _MAGENTO_PAGE,
    "shopping_get_product_attributes": _MAGENTO_PAGE,
    "shopping_get_product_price": _MAGENTO_PAGE,
    "shopping_get_num_reviews": _MAGENTO_PAGE,
    "shopping_get_rating_as_percentage": _MAGENTO_PAGE,
    "reddit_get_post_comment_tree": _POSTMILL_PAGE,
    "reddit_get_latest_comment_obj_by_username": _POSTMILL_PAGE,
    "reddit_get_latest_comment_content_by_username": _POSTMILL_PAGE,
    "reddit_get_parent_comment_obj_of_latest_comment_by_username": _POSTMILL_PAGE,
    "reddit_get_parent_comment_username_of_latest_comment_by_username": _POSTMILL_PAGE,
}


@dataclass(frozen=True)
class HelperContext:
    """What a helper may use besides its arguments: settings (site URLs) and the browser context."""

    settings: Settings
    context: BrowserContext | None
    page: Page | None


#: A helper is ``fn(ctx: HelperContext, *args)``, sync or async, returning the selected value.
Helper = Callable[..., Any]
#: Implemented helpers by name. :func:`register_helper` adds to it (and may override a site helper).
HELPERS: dict[str, Helper] = {}


def register_helper(name: str | None = None) -> Callable[[Helper], Helper]:
    """Decorator: make ``fn(ctx, *args)`` callable from configs as ``func:<name>(...)``."""

    def decorate(fn: Helper) -> Helper:
        HELPERS[name or fn.__name__] = fn
        return fn

    return decorate


class _PageArgument:
    """Marks the argument position where the page being checked goes."""

    def __repr__(self) -> str:
        return "__page__"


PAGE = _PageArgument()


@dataclass(frozen=True)
class HelperCall:
    """A parsed ``func:`` expression: helper name and literal arguments (``PAGE`` for ``__page__``)."""

    name: str
    args: tuple[Any, ...]
    source: str

    @classmethod
    def parse(cls, text: str) -> HelperCall:
        """Parse ``text`` (with or without the ``func:`` prefix); :class:`EvaluatorBuildError` if not allowed."""
        source = text.removeprefix("func:").strip()
        try:
            tree = ast.parse(source, mode="eval")
        except SyntaxError as exc:
            raise EvaluatorBuildError(f"func: expression {source!r} is not valid Python: {exc.msg}") from exc
        call = tree.body
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.keywords:
            raise EvaluatorBuildError(
                f"func: expression {source!r} must be a call of a helper by name with positional arguments"
            )
        args = tuple(_literal_argument(node, source) for node in call.args)
        helper = cls(name=call.func.id, args=args, source=source)
        helper.check_known()
        return helper

    def check_known(self) -> None:
        """The name must be a known helper; an implemented one must accept the arguments."""
        if self.name in HELPERS:
            try:
                inspect.signature(HELPERS[self.name]).bind(None, *self.args)
            except TypeError as exc:
                raise EvaluatorBuildError(f"func: {self.source!r}: wrong arguments for {self.name}: {exc}") from exc
        elif self.name not in SITE_HELPERS:
            known = ", ".join(sorted(HELPERS.keys() | SITE_HELPERS.keys()))
            raise EvaluatorBuildError(f"func: {self.source!r} calls unknown helper {self.name!r}; known: {known}")

    async def call(self, ctx: HelperContext, last_url: str) -> Any:
        """Run the helper: ``__page__`` becomes ``ctx.page``, ``__last_url__`` in strings becomes ``last_url``."""
        if self.name not in HELPERS:
            raise UnsupportedHelperError(self.name, SITE_HELPERS[self.name])
        args = [self._bind(arg, ctx, last_url) for arg in self.args]
        result = HELPERS[self.name](ctx, *args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _bind(self, arg: Any, ctx: HelperContext, last_url: str) -> Any:
        if arg is PAGE:
            if ctx.page is None:
                raise EvaluationError(f"func: {self.source!r} needs a page and none is open")
            return ctx.page
        if isinstance(arg, str):
            return arg.replace(LAST_URL, last_url)
        return arg


def _literal_argument(node: ast.expr, source: str) -> Any:
    """A string/number/bool/None literal, or ``PAGE`` for ``__page__``; anything else is refused."""
    if isinstance(node, ast.Name) and node.id in PAGE_NAMES:
        return PAGE
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str | int | float | bool)):
        return node.value
    raise EvaluatorBuildError(
        f"func: {source!r}: argument {ast.unparse(node)!r} is not a literal or __page__ (only those are allowed)"
    )


# ---- helpers that work on any site ---------------------------------------------------------------------


@register_helper()
def reddit_get_post_url(ctx: HelperContext, url: str) -> str:
    """The post a forum url belongs to: ``scheme://host/f/<forum>/<post_id>/``; other urls unchanged.

    Postmill's comment urls are ``/f/<forum>/<post_id>/<slug>/comment/<id>``; WebArena compares the post.
    """
    parsed = urlparse(url)
    parts = parsed.path.split("/")
    if len(parts) < 4 or parts[1] != "f":
        return url
    return f"{parsed.scheme}://{parsed.netloc}/f/{parts[2]}/{parts[3]}/"


_MEMBER_ROLE_JS = """(account) => {
    const accounts = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
    const index = accounts.findIndex((el) => el.outerText === '@' + account);
    const roles = document.querySelectorAll("td.col-max-role span");
    return index >= 0 && roles[index] ? roles[index].outerText : "";
}"""


@register_helper()
async def gitlab_get_project_memeber_role(ctx: HelperContext, page: Page, account_name: str) -> str:
    """The role shown for ``@account_name`` in a GitLab project-members table ("" when not listed).

    Reads GitLab's members markup (account cell ``td[data-label='Account'] span.gl-avatar-labeled-sublabel``,
    role cell ``td.col-max-role span``); any page that renders that table works. (The misspelling is
    WebArena's helper name.)
    """
    try:
        return str(await page.evaluate(_MEMBER_ROLE_JS, account_name))
    except Exception:
        return ""


_QUERY_TEXT_JS = """(selector) => {
    try { return document.querySelector(selector).textContent; } catch (e) { return ""; }
}"""


@register_helper()
async def get_query_text(ctx: HelperContext, page: Page, selector: str) -> str:
    """``textContent`` of the first element matching the CSS ``selector`` ("" when none), not lower-cased."""
    try:
        return str(await page.evaluate(_QUERY_TEXT_JS, selector))
    except Exception:
        return ""


@register_helper()
async def get_query_text_lowercase(ctx: HelperContext, page: Page, selector: str) -> str:
    """:func:`get_query_text`, lower-cased."""
    return (await get_query_text(ctx, page, selector)).lower()
