"""``webrl pages``: what the agent will see on a site, before training on it.

``webrl pages check URL...`` opens each URL as an episode's start page through the browser pool's own code
(``rollout.check_pages``: the same stock of contexts, allow-list and observation as a rollout; run here in
the embedded mode, on a ``rollout`` worker in the distributed one) and prints the observation the actor would
get, with how long the reset, the page's settling and the observation took.
"""

from __future__ import annotations

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from webrl.config import get_settings
from webrl.safety.allow_list import first_refused
from webrl.wire.contracts import CheckedPage, PageCheckRequest, PageCheckResult

ALLOW_LIST_HINT = "WEBRL_SECURITY__ALLOWED_HOSTS sets the allow-list"


def render(result: PageCheckResult) -> Group:
    """A table of timings, then each page's observation in a panel."""
    table = Table(title="pages as the agent sees them (ms)")
    for column in ("url", "title", "ids", "reset", "settle", "observe", "error"):
        table.add_column(column, justify="right" if column in ("ids", "reset", "settle", "observe") else "left")
    for page in result.pages:
        table.add_row(page.final_url, page.title, str(page.elements), f"{page.reset_ms:.0f}",
                      f"{page.settle_ms:.0f}", f"{page.observe_ms:.0f}", page.error or "")
    return Group(table, *(_panel(page) for page in result.pages))


def _panel(page: CheckedPage) -> Panel:
    moved = "" if page.final_url == page.url else f" -> {page.final_url}"
    subtitle = (f"{page.elements} ids, tabs {page.tabs}; reset {page.reset_ms:.0f} ms, settle {page.settle_ms:.0f} ms,"
                f" observe {page.observe_ms:.0f} ms")
    body = Text(page.observation)
    if page.error:
        body = Text.assemble(Text(f"error: {page.error}\n", style="red"), body)
    return Panel(body, title=f"{page.url}{moved}", subtitle=subtitle)


def register(app: typer.Typer) -> None:
    pages = typer.Typer(help="Pages as the agent sees them.", no_args_is_help=True)

    @pages.command("check")
    def check(
        urls: list[str] = typer.Argument(..., help="http(s) URLs on the browser allow-list."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (PageCheckResult)."),
    ) -> None:
        """Open each URL as an agent's start page and print the observation it would get, with timings."""
        from webrl.wire.clients import rollout_check_pages

        if problem := first_refused(urls, get_settings().host_allow_list()):
            typer.echo(f"webrl pages check: {problem} ({ALLOW_LIST_HINT})", err=True)
            raise typer.Exit(2)
        with Console(stderr=True).status(f"opening {len(urls)} page(s) in Chromium"):
            result = rollout_check_pages(PageCheckRequest(urls=urls))
        if as_json:
            typer.echo(result.model_dump_json(indent=2))
        else:
            Console().print(render(result))

    app.add_typer(pages, name="pages")
