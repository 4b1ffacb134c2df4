"""``webrl serve SERVICE``: run one service's REST API (uvicorn), refusing an open one on the network."""

from __future__ import annotations

from urllib.parse import urlsplit

import typer

from webrl.config import get_settings

#: Services with a REST API (``services/<name>/app.py``) and the port each listens on by default (the ports of
#: docker-compose.yml and k8s/); a service with a URL setting (``browser.pool_url``, ``actor.url``) listens on
#: that URL's port instead.
SERVICE_PORTS = {"browser_pool": 8101, "actor": 8102, "orm": 8103, "critic": 8104, "taskgen": 8105, "trainer": 8106}
SERVICES = tuple(SERVICE_PORTS)


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        service: str = typer.Argument(..., help=f"One of {', '.join(SERVICES)}."),
        host: str = typer.Option("127.0.0.1", help="Address to listen on. Off loopback an API key is required "
                                 "(WEBRL_SECURITY__API_KEY) unless WEBRL_SECURITY__ALLOW_NO_AUTH=1."),
        port: int | None = typer.Option(None, min=1, max=65535, help="Port (default: the port of the service's "
                                        "URL setting where it has one, WEBRL_ACTOR__URL or WEBRL_BROWSER__POOL_URL, "
                                        "else the service's own: 8101 .. 8106)."),
    ) -> None:
        """Serve SERVICE's REST API (what the containers run)."""
        from webrl.serving.factory import unauthenticated_bind_problem

        if service not in SERVICES:
            raise typer.BadParameter(f"unknown service {service!r}; one of {', '.join(SERVICES)}",
                                     param_hint="SERVICE")
        settings = get_settings()
        problem = unauthenticated_bind_problem(host, settings)
        if problem:
            raise typer.BadParameter(problem, param_hint="--host")
        import uvicorn

        from webrl.errors import bind_or_explain

        configured = settings.service_url(service)
        chosen = port or (urlsplit(configured).port if configured else None) or SERVICE_PORTS[service]
        bind_or_explain(host, chosen, f"the {service} service", "is it already served? Stop it, or give --port N "
                        "(and point its callers at it, e.g. WEBRL_ACTOR__URL)").close()  # taken: one line, no traceback
        uvicorn.run(f"services.{service}.app:app", host=host, port=chosen)
