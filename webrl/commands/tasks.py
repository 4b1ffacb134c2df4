"""``webrl tasks``: the sandbox task suite (export as WebArena JSON, load into the database, stats)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import typer

from webrl.commands import check_output_file, check_split
from webrl.config import get_settings
from webrl.orchestration.task_suite import load_checked, load_summary
from webrl.wire.contracts import MAX_SEED

SEED_HELP = "Suite seed (default: WEBRL_SEED)."


def register(app: typer.Typer) -> None:
    tasks = typer.Typer(help="The sandbox task suite (WebArena JSON).", no_args_is_help=True)

    @tasks.command("export")
    def export(
        split: str = typer.Option("test", callback=check_split, help="train or test."),
        out: Path | None = typer.Option(None, callback=lambda out: check_output_file(out, "--out"),
                                        help="Write here (default: stdout)."),
        seed: int | None = typer.Option(None, min=0, max=MAX_SEED, help=SEED_HELP),
    ) -> None:
        """Write a split as a JSON list of WebArena task configs (placeholder URLs, like test.raw.json)."""
        from webrl.sandbox.tasks.suite import build_suite

        configs = build_suite(get_settings().seed if seed is None else seed)[split]
        text = json.dumps([c.to_json() for c in configs], indent=2, ensure_ascii=False)
        if out is None:
            typer.echo(text)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text + "\n")
            typer.echo(f"wrote {len(configs)} {split} tasks to {out}", err=True)

    @tasks.command("load")
    def load(seed: int | None = typer.Option(None, min=0, max=MAX_SEED, help=SEED_HELP)) -> None:
        """Upsert both splits into the database (its schema brought up to date first): train as origin 'seed', test
        as origin 'test'. Refused when the database holds the suite of another seed."""
        from webrl.db.migrate import upgrade

        settings = get_settings()
        settings.ensure_dirs()
        upgrade(settings)
        typer.echo(load_summary(load_checked(settings, settings.seed if seed is None else seed)))

    @tasks.command("stats")
    def stats(seed: int | None = typer.Option(None, min=0, max=MAX_SEED, help=SEED_HELP)) -> None:
        """Tasks per split, site, kind and template."""
        from webrl.sandbox.tasks.suite import build_suite, template_by_id

        suite = build_suite(get_settings().seed if seed is None else seed)
        kinds = {t.id: t.kind for t in template_by_id().values()}
        for split, configs in suite.items():
            by_site = Counter(c.site for c in configs)
            by_kind = Counter(kinds[c.intent_template_id] for c in configs)
            n_templates = len({c.intent_template_id for c in configs})
            typer.echo(f"{split}: {len(configs)} tasks, {n_templates} templates; sites {dict(by_site)}; "
                       f"kinds {dict(by_kind)}")

    app.add_typer(tasks, name="tasks")
