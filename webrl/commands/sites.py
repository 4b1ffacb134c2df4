"""``webrl sites``: the built-in sandbox websites (serve, build their databases, list them)."""

from __future__ import annotations

import typer

from webrl.config import get_settings


def register(app: typer.Typer) -> None:
    sites = typer.Typer(help="The built-in sandbox websites.", no_args_is_help=True)

    @sites.command("serve")
    def serve(
        port_offset: int = typer.Option(0, help="Added to every site's port (from WEBRL_SITES__<SITE>_URL, else "
                                        "config.SANDBOX_PORTS)."),
        only: list[str] = typer.Option(None, "--site", help="Serve only these sites (repeatable)."),
    ) -> None:
        """Serve every sandbox site on the port its WEBRL_SITES__<SITE>_URL names (default config.SANDBOX_PORTS), so the
        workers that read the same settings find it; print the URLs the placeholders resolve to."""
        from webrl.config import SITE_PLACEHOLDERS
        from webrl.sandbox.server import running_sandbox, sandbox_ports
        from webrl.sandbox.sites import SITES

        names = only or list(SITES)
        unknown = sorted(set(names) - set(SITES))
        if unknown:
            raise typer.BadParameter(f"unknown sites {unknown}; present: {list(SITES)}", param_hint="--site")
        settings = get_settings()
        settings.ensure_dirs()
        configured = sandbox_ports(settings)
        ports = {site: configured[site] + port_offset for site in names}
        with running_sandbox(settings, ports, names) as served:
            for site in names:
                typer.echo(f"{SITE_PLACEHOLDERS[site]:<20} {served.site_url(site)}")
            typer.echo("serving; Ctrl-C stops")
            _wait_forever()

    @sites.command("build")
    def build() -> None:
        """Build the template databases for WEBRL_SEED (once; episodes copy them)."""
        from webrl.sandbox.server import make_store

        settings = get_settings()
        store = make_store(settings)
        for db in store.builders:
            typer.echo(f"{db}: {store.template_path(db)}")

    @sites.command("list")
    def list_sites() -> None:
        """The sandbox sites present, their database and default URL."""
        from webrl.sandbox.sites import SITES

        settings = get_settings()
        for spec in SITES.values():
            typer.echo(f"{spec.name:<16} db={spec.db:<8} {settings.site_url(spec.name)}")

    app.add_typer(sites, name="sites")


def _wait_forever() -> None:
    import time

    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        typer.echo("stopped")
