"""Fixtures for the sandbox tests: every present site served once per test session from a temporary home."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from webrl.config import Settings
from webrl.sandbox.server import running_sandbox


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings whose site URLs point at the running sandbox (free ports, fresh template databases)."""
    home = tmp_path_factory.mktemp("sandbox-home")
    with running_sandbox(Settings(home=home, database={"url": f"sqlite:///{home}/webrl.db"})) as served:
        yield served
