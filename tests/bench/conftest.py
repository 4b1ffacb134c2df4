"""The bench scripts are files, not a package: tests load them by path."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` as a module (registered as ``bench_<name>``), with bench/ on the path for the helpers it
    imports as a script does (``isolated_home``)."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.append(str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(name="load_bench")
def load_bench_fixture() -> Callable[[str], ModuleType]:
    """:func:`load_bench`, for tests of the bench scripts."""
    return load_bench
