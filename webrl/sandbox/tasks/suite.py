"""The sandbox task suite: every present site's templates instantiated and split into train and test.

``build_suite(seed=0) -> {"train": [TaskConfig], "test": [TaskConfig]}`` is deterministic for a seed and
the set of present sites. The test split has exactly :data:`TEST_SIZE` tasks:

1. held-out templates: :data:`HOLDOUT_TEMPLATES` whole templates (spread over the sites) never appear in
   train; each gives up to :data:`HOLDOUT_PER_TEMPLATE` test tasks (the rest of its instantiations are
   dropped, so the template stays unseen in training);
2. new instantiations of train templates fill the remaining test slots, taken round-robin over templates
   from the end of each template's instantiation list, so every train template keeps most of its tasks.

No intent is in both splits (instantiations are distinct per template and intents embed the template).
Task ids are integers per split (0..n-1); the database key of a task is ``sandbox/<split>/<task_id>``
(:func:`task_key`).
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

from webrl.agent.schemas import TaskConfig
from webrl.config import Settings, get_settings
from webrl.sandbox.sites import SITES, builders
from webrl.sandbox.store import EpisodeStore
from webrl.sandbox.tasks.base import SiteData, Template

TEST_SIZE = 165  # WebArena-Lite's test set has 165 tasks (WebRL paper, Sec. 5.1)
HOLDOUT_TEMPLATES = 4  # whole templates kept out of training, to measure generalisation to new intents
HOLDOUT_PER_TEMPLATE = 20  # test tasks per held-out template
MIN_TRAIN_PER_TEMPLATE = 8  # a train template keeps at least this many training tasks


def all_templates() -> list[Template]:
    """Every present site's templates, ordered by id; ids must be unique."""
    templates: list[Template] = []
    for spec in SITES.values():
        templates.extend(spec.task_templates())
    templates.sort(key=lambda t: t.id)
    ids = [t.id for t in templates]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"duplicate intent_template_id values across sites: {duplicates}")
    return templates


def template_by_id() -> dict[int, Template]:
    return {t.id: t for t in all_templates()}


def _rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def holdout_ids(templates: list[Template], seed: int) -> set[int]:
    """Pick :data:`HOLDOUT_TEMPLATES` templates, one site at a time in turn (deterministic for a seed)."""
    by_site: dict[str, list[Template]] = {}
    for t in templates:
        by_site.setdefault(t.site, []).append(t)
    for site, items in by_site.items():
        _rng(seed, "holdout", site).shuffle(items)
    chosen: set[int] = set()
    sites = sorted(by_site)
    turn = 0
    while len(chosen) < HOLDOUT_TEMPLATES and any(len(by_site[s]) > 1 for s in sites):
        site = sites[turn % len(sites)]
        turn += 1
        if len(by_site[site]) > 1:  # never hold out a site's last template
            chosen.add(by_site[site].pop().id)
    return chosen


def suite_data(seed: int, root: Path | None = None) -> SiteData:
    """Template databases for ``seed`` (built if missing) under ``root`` (default: the settings home)."""
    base = root or Path(get_settings().home) / "sandbox" / f"seed{seed}"
    store = EpisodeStore(base, seed, builders())
    return SiteData({db: store.template_path(db) for db in store.builders}, seed)


def _split(templates: list[Template], data: SiteData, seed: int) -> tuple[list, list]:
    """(train, test) lists of (template, instantiation)."""
    held = holdout_ids(templates, seed)
    instances = {t.id: t.instantiate(data, _rng(seed, "instances", t.id)) for t in templates}
    test = [(t, inst) for t in templates if t.id in held for inst in instances[t.id][:HOLDOUT_PER_TEMPLATE]]
    pools = {t.id: list(instances[t.id]) for t in templates if t.id not in held}
    order = [t for t in templates if t.id not in held]
    while len(test) < TEST_SIZE:
        progressed = False
        for t in order:
            if len(test) >= TEST_SIZE:
                break
            if len(pools[t.id]) > MIN_TRAIN_PER_TEMPLATE:
                test.append((t, pools[t.id].pop()))
                progressed = True
        if not progressed:
            raise ValueError(f"not enough instantiations for a {TEST_SIZE}-task test split")
    test = test[:TEST_SIZE]
    train = [(t, inst) for t in order for inst in pools[t.id]]
    return train, test


@lru_cache(maxsize=4)
def _build(seed: int, root: Path | None) -> dict[str, list[TaskConfig]]:
    data = suite_data(seed, root)
    try:
        train, test = _split(all_templates(), data, seed)
        return {
            "train": [t.config(i, inst, data) for i, (t, inst) in enumerate(train)],
            "test": [t.config(i, inst, data) for i, (t, inst) in enumerate(test)],
        }
    finally:
        data.close()


def build_suite(seed: int = 0, root: Path | None = None) -> dict[str, list[TaskConfig]]:
    """``{"train": [...], "test": [...]}`` for ``seed`` (see the module docstring). Returns copies."""
    built = _build(seed, root)
    return {split: [c.model_copy(deep=True) for c in configs] for split, configs in built.items()}


def task_key(split: str, config: TaskConfig) -> str:
    return f"sandbox/{split}/{config.task_id}"


def stored_sandbox_keys(session: Any) -> set[str]:
    """The sandbox task keys the database holds."""
    from sqlalchemy import select

    from webrl.db import models as m

    return set(session.scalars(select(m.Task.key).where(m.Task.key.like("sandbox/%"))))


def load_suite(settings: Settings, seed: int = 0) -> dict[str, int]:
    """Insert both splits into the database, skipping keys already stored (idempotent, like
    ``repository.upsert_task`` but in one round trip): train with origin ``seed``, test with origin ``test``;
    keys ``sandbox/<split>/<task_id>``. Returns the number of tasks per split."""
    from sqlalchemy import select

    from webrl.db import models as m
    from webrl.db.repository import insert_each_once, normalise_intent
    from webrl.db.session import session_scope

    suite = build_suite(seed)
    configs = {task_key(split, c): (split, c) for split, split_configs in suite.items() for c in split_configs}

    def make(key: str) -> m.Task:
        split, c = configs[key]
        return m.Task(key=key, intent=c.intent, intent_norm=normalise_intent(c.intent), site=c.site,
                      origin="seed" if split == "train" else "test", split=split, phase=0, config=c.to_json())

    with session_scope(settings) as session:
        stored = stored_sandbox_keys(session)
        # a second process loading the suite at the same time (two commands on a fresh laptop database) may store
        # some of these keys between this look and the insert: each is then that process's row
        insert_each_once(session, [key for key in configs if key not in stored], make,
                         lambda key: session.scalar(select(m.Task).where(m.Task.key == key)))
    return {split: len(configs) for split, configs in suite.items()}
