"""A tiny bootstrapped world for the tests that run the pipeline (tests/webrl/pipeline, tests/webrl/viewer):
sandbox sites on free ports, the suite loaded, a tiny SFT actor trained on a few oracle demonstrations (once per
test session), and a home filled by a real smoke run (once per module that asks for it)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from local_ports import free_port

from webrl.config import Settings, get_settings


def site_env() -> dict[str, str]:
    from webrl.sandbox.sites import SITES

    return {f"WEBRL_SITES__{site.upper()}_URL": f"http://127.0.0.1:{free_port()}" for site in SITES}


@contextlib.contextmanager
def embedded_home(home: Path, env: dict[str, str]) -> Iterator[Settings]:
    """The process environment of an embedded home (``env``: its sandbox URLs) for a session- or module-scoped
    fixture (monkeypatch is per test); restored afterwards."""
    saved = dict(os.environ)
    os.environ.update({"WEBRL_HOME": str(home), **env})
    for var in ("WEBRL_DATABASE__URL", "WEBRL_JOBS__BROKER_URL", "WEBRL_SECURITY__API_KEY"):
        os.environ.pop(var, None)
    get_settings.cache_clear()
    try:
        yield get_settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()


@pytest.fixture(scope="session")
def tiny_actor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test-size actor bootstrapped once per session (oracle demos through Chromium, SFT)."""
    from webrl.orchestration.bootstrap import BootstrapConfig, run_bootstrap

    with embedded_home(tmp_path_factory.mktemp("bootstrap-home"), site_env()) as settings:
        config = BootstrapConfig(size="test", vocab_size=1024, demos_per_template=1, max_demos=6, epochs=2,
                                 sft_minutes=0.5, concurrency=2, evaluate=False)
        result = run_bootstrap(settings, config)
    return Path(result.path)


@dataclass(frozen=True)
class SmokeHome:
    """A home after ``webrl train --preset smoke --screenshots`` (run "smoke") and a short ``webrl eval``."""

    home: Path
    env: dict[str, str]  # its WEBRL_ variables (home, sandbox URLs), for processes that read it
    settings: Settings
    train_args: list[str]  # the `webrl train` command line of the run
    train_output: str  # what that command printed


@pytest.fixture(scope="session")
def smoke_home(tmp_path_factory: pytest.TempPathFactory, tiny_actor: Path) -> Iterator[SmokeHome]:
    """A real smoke run (phase 0 with 3 oracle demonstrations and one WebRL phase, screenshots on) plus
    ``webrl eval`` on two test tasks (screenshots on by default), through the CLI, in an embedded home of its own;
    once per test session (tests/webrl/pipeline/test_pipeline_smoke.py checks the run, the viewer shows it)."""
    from transformers.utils import logging as transformers_logging
    from typer.testing import CliRunner

    from webrl.cli import app
    from webrl.wire.queue import configure

    home, env = tmp_path_factory.mktemp("smoke-home"), site_env()
    with embedded_home(home, env) as settings:
        configure(settings)
        transformers_logging.enable_progress_bar()  # as in a fresh process (another test may have turned them off)
        actor = str(tiny_actor)
        train = ["train", "--preset", "smoke", "--run", "smoke", "--actor", actor, "--orm", actor, "--demo-tasks",
                 "3", "--screenshots"]
        evaluate = ["eval", "--actor", actor, "--limit", "2", "--max-steps", "2", "--concurrency", "2"]
        outputs = []
        for args in (train, evaluate):
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 0, result.output + repr(result.exception)
            outputs.append(result.output)
    # the process environment is restored here: the tests that use the home get its variables themselves
    # (``env``; monkeypatch), so no other test of the session sees this home's sites
    yield SmokeHome(home, {"WEBRL_HOME": str(home), **env}, settings, train, outputs[0])


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Embedded settings under a fresh home with the sandbox URLs on free ports."""
    monkeypatch.setenv("WEBRL_HOME", str(tmp_path / "home"))
    for var, value in site_env().items():
        monkeypatch.setenv(var, value)
    for var in ("WEBRL_DATABASE__URL", "WEBRL_JOBS__BROKER_URL", "WEBRL_SECURITY__API_KEY"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    from webrl.wire.queue import configure

    configure(get_settings())
    yield get_settings()
    get_settings.cache_clear()


@pytest.fixture
def smoke_world(smoke_home: SmokeHome, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings of the session's smoke run (:func:`smoke_home`), with its environment set for this test."""
    from webrl.wire.queue import configure

    for var in ("WEBRL_DATABASE__URL", "WEBRL_JOBS__BROKER_URL", "WEBRL_SECURITY__API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var, value in smoke_home.env.items():
        monkeypatch.setenv(var, value)
    get_settings.cache_clear()
    configure(get_settings())
    return get_settings()
