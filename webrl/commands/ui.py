"""``webrl ui``: the run viewer (:mod:`webrl.viewer`) on uvicorn, under the same auth rules as ``webrl serve``."""

from __future__ import annotations

import typer

from webrl.config import get_settings

VIEWER_PORT = 8107  # next to the services' 8101 .. 8106 (docker-compose.yml and k8s/ use it too)


def register(app: typer.Typer) -> None:
    @app.command("ui")
    def ui(
        host: str = typer.Option("127.0.0.1", help="Address to listen on. Off loopback an API key is required "
                                 "(WEBRL_SECURITY__API_KEY) unless WEBRL_SECURITY__ALLOW_NO_AUTH=1."),
        port: int = typer.Option(VIEWER_PORT, min=1, max=65535, help="Port."),
    ) -> None:
        """Browse runs, phases, generated tasks and trajectories step by step (read-only, in a browser)."""
        from webrl.serving.factory import unauthenticated_bind_problem

        settings = get_settings()
        problem = unauthenticated_bind_problem(host, settings)
        if problem:
            raise typer.BadParameter(problem, param_hint="--host")
        import uvicorn

        from webrl.viewer.app import build_app

        uvicorn.run(build_app(settings), host=host, port=port)
