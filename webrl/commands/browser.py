"""``webrl browser``: Chromium as a server of its own (:mod:`webrl.serving.browser_server`), for a browser pool that
connects to it over CDP (``WEBRL_BROWSER__CDP_URL``)."""

from __future__ import annotations

import typer

from webrl.config import get_settings

BROWSER_SERVER_PORT = 9230  # the chromium pod's port (k8s/base/chromium.yaml)


def register(app: typer.Typer) -> None:
    browser = typer.Typer(help="Chromium served over CDP to a browser pool.", no_args_is_help=True)

    @browser.command("serve")
    def serve(
        host: str = typer.Option("127.0.0.1", help="Address to listen on. Off loopback WEBRL_BROWSER__CDP_TOKEN is "
                                 "required (anyone who connects drives a browser)."),
        port: int = typer.Option(BROWSER_SERVER_PORT, min=0, max=65535, help="Port."),
        max_browsers: int = typer.Option(16, min=1, help="Most browsers running at once (one per connection)."),
    ) -> None:
        """A fresh Chromium (WEBRL_BROWSER__CHROMIUM_PATH, Playwright's switches) for each WebSocket connection, relayed
        over CDP, gone with its profile when the connection closes; point WEBRL_BROWSER__CDP_URL at ws://HOST:PORT/.
        Connections from web pages (an Origin header) and, with WEBRL_BROWSER__CDP_TOKEN, without it are refused.
        The browsers reach only WEBRL_SECURITY__ALLOWED_HOSTS (else the configured sites), narrowed to the list a
        connection names (the pool names its episode's), through a proxy each."""
        import asyncio

        from webrl.errors import bind_or_explain
        from webrl.serving.browser_server import UnguardedBrowserServer, run, unguarded_bind_problem

        settings = get_settings()
        browser_settings = settings.browser
        if problem := unguarded_bind_problem(host, browser_settings.cdp_token):
            raise UnguardedBrowserServer(problem)  # before Chromium is read off a launch: a one-line error
        bind_or_explain(host, port, "the browser server", "is one already running? Stop it, or give --port N (and "
                        "point WEBRL_BROWSER__CDP_URL at it)").close()  # taken, or no such address: one line
        asyncio.run(run(host, port, browser_settings.chromium_path, max_browsers, browser_settings.cdp_token,
                        allowed=settings.host_allow_list()))

    app.add_typer(browser, name="browser")
