"""Loading the sandbox task suite into the database, refused when the database holds another seed's suite.

Here and not in ``webrl.sandbox``: code there is part of a stored evaluation's key
(``webrl.store.evaluations.CODE_PATHS``), and this module shapes no episode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from webrl.agent.schemas import TaskConfig
from webrl.config import Settings
from webrl.errors import UserError


class SplitLoad(NamedTuple):
    """What :func:`load_checked` did to one split: the tasks it inserted and those the database held already."""

    new: int
    stored: int


def load_checked(settings: Settings, seed: int) -> dict[str, SplitLoad]:
    """``load_suite(settings, seed)`` (it skips the keys already stored), refused with a :class:`UserError`, storing
    nothing, when a task stored under one of the suite's keys is not the one ``seed`` generates: the keys name a
    split and an index, not the seed, so the suite of another seed would keep its tasks under them."""
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
