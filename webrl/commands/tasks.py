"""``webrl tasks``: the sandbox task suite (export as WebArena JSON, load into the database, stats)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import typer

from webrl.agent.schemas import TaskConfig
from webrl.commands import check_output_file, check_split
from webrl.config import Settings, get_settings
from webrl.errors import UserError


class SplitLoad(NamedTuple):
    """What :func:`load_checked` did to one split: the tasks it inserted and those the database held already."""

    new: int
    stored: int


def load_checked(settings: Settings, seed: int) -> dict[str, SplitLoad]:
    """``load_suite(settings, seed)`` (it skips the keys already stored), refused with a :class:`UserError`, storing
    nothing, when a task stored under one of the suite's keys is not the one ``seed`` generates: the keys name a
    split and an index, not the seed, so the suite of another seed would keep its tasks under them. Here and not in
    ``webrl.sandbox``: code there is part of a stored evaluation's key (``webrl.store.evaluations.CODE_PATHS``)."""
    from webrl.sandbox.tasks.suite import build_suite, load_suite, task_key

    suite = build_suite(seed)
    stored = _stored_sandbox_configs(settings)
    _check_same_suite(suite, stored, seed)
    load_suite(settings, seed)
    return {split: SplitLoad(new=sum(task_key(split, c) not in stored for c in configs),
                             stored=sum(task_key(split, c) in stored for c in configs))
            for split, configs in suite.items()}


def _stored_sandbox_configs(settings: Settings) -> dict[str, Any]:
    """Key -> stored config of every ``sandbox/...`` task."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.session import session_scope

    with session_scope(settings) as session:
        query = select(m.Task.key, m.Task.config).where(m.Task.key.like("sandbox/%"))
        return dict(session.execute(query).tuples().all())


def _check_same_suite(suite: dict[str, list[TaskConfig]], stored: dict[str, Any], seed: int) -> None:
    """:class:`UserError` when a stored config under a key of ``suite`` differs from the one ``suite`` has there.
    The configs do not record their seed, so the message cannot name the seed the database holds."""
    from webrl.sandbox.tasks.suite import task_key

    differ = [key for split, configs in suite.items() for c in configs
              if (key := task_key(split, c)) in stored and stored[key] != c.to_json()]
    if differ:
        total = sum(map(len, suite.values()))
        raise UserError(
            f"the database holds another sandbox suite: {len(differ)} of the {total} tasks of suite seed {seed} "
            f"differ from those stored under their keys (first: {differ[0]}), so it was loaded with another seed "
            "(`webrl tasks load --seed`, default WEBRL_SEED; the stored tasks do not record which) or by another "
            "version of the suite; nothing was stored: use the seed it holds (--seed or WEBRL_SEED), or a fresh "
            "database (WEBRL_HOME or WEBRL_DATABASE__URL)")


def load_summary(loaded: dict[str, SplitLoad]) -> str:
    """``train: 1867 new, 0 already stored; test: ...``: what :func:`load_checked` did, for a person."""
    return "; ".join(f"{split}: {n.new} new, {n.stored} already stored" for split, n in loaded.items())


def register(app: typer.Typer) -> None:
    tasks = typer.Typer(help="The sandbox task suite (WebArena JSON).", no_args_is_help=True)

    @tasks.command("export")
    def export(
        split: str = typer.Option("test", callback=check_split, help="train or test."),
        out: Path | None = typer.Option(None, callback=lambda out: check_output_file(out, "--out"),
                                        help="Write here (default: stdout)."),
        seed: int | None = typer.Option(None, help="Suite seed (default: WEBRL_SEED)."),
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
    def load(seed: int | None = typer.Option(None, help="Suite seed (default: WEBRL_SEED).")) -> None:
        """Upsert both splits into the database: train as origin 'seed', test as origin 'test'. Refused when the
        database holds the suite of another seed."""
        typer.echo(load_summary(load_checked(get_settings(), get_settings().seed if seed is None else seed)))

    @tasks.command("stats")
    def stats(seed: int | None = typer.Option(None, help="Suite seed (default: WEBRL_SEED).")) -> None:
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
