"""A tiny bootstrapped world for pipeline tests: sandbox sites on free ports, the suite loaded, and a
tiny SFT actor trained on a few oracle demonstrations (shared by the module's tests)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from webrl.config import Settings, get_settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def site_env() -> dict[str, str]:
    from webrl.sandbox.sites import SITES

    return {f"WEBRL_{site.upper()}_URL": f"http://127.0.0.1:{free_port()}" for site in SITES}


@pytest.fixture(scope="session")
def tiny_actor(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test-size actor bootstrapped once per session (oracle demos through Chromium, SFT)."""
    from webrl.models.bootstrap import BootstrapConfig, run_bootstrap

    home = tmp_path_factory.mktemp("bootstrap-home")
    saved = dict(os.environ)
    os.environ.update({"WEBRL_HOME": str(home), **site_env()})
    for var in ("WEBRL_DATABASE_URL", "WEBRL_BROKER_URL"):
        os.environ.pop(var, None)
    get_settings.cache_clear()
    try:
        config = BootstrapConfig(size="test", vocab_size=1024, demos_per_template=1, max_demos=6, epochs=2,
                                 sft_minutes=0.5, concurrency=2, evaluate=False)
        result = run_bootstrap(get_settings(), config)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()
    return Path(result.path)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Embedded settings under a fresh home with the sandbox URLs on free ports."""
    monkeypatch.setenv("WEBRL_HOME", str(tmp_path / "home"))
    for var, value in site_env().items():
        monkeypatch.setenv(var, value)
    for var in ("WEBRL_DATABASE_URL", "WEBRL_BROKER_URL", "WEBRL_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    from webrl.queue import configure

    configure(get_settings())
    yield get_settings()
    get_settings.cache_clear()
