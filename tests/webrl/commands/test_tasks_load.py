"""``webrl tasks load`` (and every command that loads the suite first): the same seed again stores nothing and says
so; another seed's suite over it is refused, storing nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, func, select

from webrl.config import Settings
from webrl.db import models as m
from webrl.db.migrate import upgrade
from webrl.db.session import session_scope
from webrl.errors import UserError
from webrl.orchestration.task_suite import SplitLoad, load_checked, load_summary
from webrl.sandbox.tasks.suite import TEST_SIZE, build_suite


def _n_tasks(settings: Settings) -> int:
    with session_scope(settings) as session:
        return session.scalar(select(func.count()).select_from(m.Task)) or 0


def test_the_same_seed_again_stores_nothing_and_says_so(settings: Settings) -> None:
    upgrade(settings)
    n_train = len(build_suite(0)["train"])
    first = load_checked(settings, 0)
    assert first == {"train": SplitLoad(new=n_train, stored=0), "test": SplitLoad(new=TEST_SIZE, stored=0)}
    assert load_checked(settings, 0) == {"train": SplitLoad(0, n_train), "test": SplitLoad(0, TEST_SIZE)}
    assert _n_tasks(settings) == n_train + TEST_SIZE
    assert load_summary(load_checked(settings, 0)) == (f"train: 0 new, {n_train} already stored; "
                                                       f"test: 0 new, {TEST_SIZE} already stored")


def test_another_seed_is_refused_storing_nothing(settings: Settings) -> None:
    """The keys name tasks by split and index, not seed: seed 1 loaded over seed 0 would keep seed 0's tasks under
    keys seed 1 describes otherwise. Refused naming --seed; the missing task is not added by it either."""
    upgrade(settings)
    load_checked(settings, 0)
    with session_scope(settings) as session:
        session.execute(delete(m.Task).where(m.Task.key == "sandbox/test/0"))
    before = _n_tasks(settings)
    with pytest.raises(UserError, match=r"another sandbox suite: \d+ of the \d+ tasks of suite seed 1 differ.*--seed"):
        load_checked(settings, 1)
    assert _n_tasks(settings) == before
    with session_scope(settings) as session:
        kept = session.scalar(select(m.Task.config).where(m.Task.key == "sandbox/test/1"))
    assert kept == build_suite(0)["test"][1].to_json()
    assert load_checked(settings, 0)["test"] == SplitLoad(new=1, stored=TEST_SIZE - 1)  # its own seed fills the gap


def test_every_command_that_loads_the_suite_first_is_refused_over_another_seed(
        settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    """``webrl train``, ``eval`` and the rest load the suite of WEBRL_SEED first (``ensure_ready``): they say what
    they stored only when they stored something, and refuse a database that holds another seed's suite."""
    from webrl.commands.train import ensure_ready

    ensure_ready(settings)
    assert f"test: {TEST_SIZE} new, 0 already stored" in " ".join(capsys.readouterr().out.split())
    ensure_ready(settings)
    assert capsys.readouterr().out == ""
    with pytest.raises(UserError, match="suite seed 1 "):
        ensure_ready(settings.replace(seed=1))
