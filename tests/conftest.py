"""Shared fixtures: settings under a temporary home, a fresh PostgreSQL database per test session,
the local Redis. Tests that need Postgres or Redis are marked and skipped only when the server is
absent outside CI (in CI, `.ci/run` starts both, and a missing server is a failure)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from webrl.config import Settings, get_settings

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/15"
#: The real WebArena and WebArena-Lite test configs (data/webarena/README.md: source, licence).
WEBARENA_DATA = Path(__file__).resolve().parents[1] / "data" / "webarena"
IN_CI = bool(os.environ.get("CI"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-exhaustive", action="store_true",
                     help="also run tests marked exhaustive (the oracle over the whole suite, about an hour)")


def pytest_configure(config: pytest.Config) -> None:
    # here, not in pyproject.toml: editing that file re-runs `make setup`'s install
    config.addinivalue_line("markers", "vllm: needs vLLM's interpreter (WEBRL_VLLM_PYTHON, set by `make test-vllm`); "
                                       "skipped without it")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("WEBRL_VLLM_PYTHON"):  # webrl.models.backends.vllm_server.VLLM_PYTHON_ENV
        skip_vllm = pytest.mark.skip(reason="vllm: needs vLLM's interpreter in WEBRL_VLLM_PYTHON (make test-vllm)")
        for item in items:
            if item.get_closest_marker("vllm") is not None:
                item.add_marker(skip_vllm)
    if config.getoption("--run-exhaustive"):
        return
    skip = pytest.mark.skip(reason="exhaustive: run with --run-exhaustive (make test-exhaustive)")
    for item in items:
        if "exhaustive" in item.keywords:
            item.add_marker(skip)


def _unavailable(what: str, exc: Exception) -> None:
    if IN_CI:
        pytest.fail(f"{what} is required in CI but unreachable: {exc}")
    pytest.skip(f"{what} unreachable: {exc}")


@pytest.fixture(scope="session", autouse=True)
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Requests may name the session's model folders (they live in pytest's temporary folder, outside each
    test's artifacts store) as models to load (``WEBRL_SECURITY__MODEL_DIRS``, webrl.serving.paths); child processes
    inherit it."""
    before = os.environ.get("WEBRL_SECURITY__MODEL_DIRS")
    os.environ["WEBRL_SECURITY__MODEL_DIRS"] = str(tmp_path_factory.getbasetemp())
    yield
    if before is None:
        os.environ.pop("WEBRL_SECURITY__MODEL_DIRS", None)
    else:
        os.environ["WEBRL_SECURITY__MODEL_DIRS"] = before


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Embedded-mode settings under a fresh home (SQLite, eager jobs)."""
    monkeypatch.setenv("WEBRL_HOME", str(tmp_path / "home"))
    for var in ("WEBRL_DATABASE__URL", "WEBRL_JOBS__BROKER_URL", "WEBRL_SECURITY__API_KEY", "WEBRL_JOBS__REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    get_settings.cache_clear()
    s = get_settings()
    s.ensure_dirs()
    yield s
    get_settings.cache_clear()


@pytest.fixture
def free_sites(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``settings`` whose sandbox site URLs are free local ports (the workers read the same environment)."""
    import socket

    from webrl.sandbox.sites import SITES

    for site in SITES:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        monkeypatch.setenv(f"WEBRL_SITES__{site.upper()}_URL", f"http://127.0.0.1:{port}")
    get_settings.cache_clear()
    return get_settings()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh database on the local PostgreSQL for this test session, dropped afterwards."""
    from sqlalchemy import create_engine, text

    name = f"webrl_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    yield url
    from webrl.db.session import engine_for

    engine_for.cache_clear()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def redis_url() -> str:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except Exception as exc:
        _unavailable("Redis at 127.0.0.1:6379", exc)
    return REDIS_URL


@pytest.fixture
def webarena_configs() -> list[dict]:
    """The 165 WebArena-Lite configs, then the 812 WebArena ones, as their files hold them."""
    import gzip
    import json

    configs: list[dict] = []
    for path in sorted(WEBARENA_DATA.glob("*.json*")):
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        configs.extend(json.loads(text))
    assert configs, f"no WebArena configs in {WEBARENA_DATA}"
    return configs


@pytest.fixture(scope="session")
def smollm2_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct converted once per test session from the installed wheel (~30 s, 540 MB)."""
    from webrl.models.pretrained_base import convert_base, spec_of

    return convert_base(spec_of("smollm2-135m"), tmp_path_factory.mktemp("bases") / "smollm2-135m")


@pytest.fixture
def with_smollm2(settings: Settings, smollm2_base: Path) -> Settings:
    """``settings`` whose artifacts hold the converted SmolLM2 base (a link to the session's conversion)."""
    from webrl.models.pretrained_base import base_dir

    link = base_dir(settings, "smollm2-135m")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(smollm2_base, target_is_directory=True)
    return settings


@pytest.fixture(scope="session")
def vllm_server(smollm2_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A real vLLM (the interpreter in WEBRL_VLLM_PYTHON: ``make test-vllm``) serving the SmolLM2 base in bf16
    under its folder's name (``smollm2-135m``), LoRA enabled, the shipped SFT adapter loaded under its folder's
    path (the name the actor service asks for when WEBRL_ACTOR__MODEL is that folder); one per test session,
    stopped afterwards. Only tests marked ``vllm`` ask for it."""
    from webrl.demo import SHIPPED_ACTOR
    from webrl.models.backends.vllm_server import VLLM_PYTHON_ENV, free_port, running_vllm, vllm_command

    port = free_port()
    command = vllm_command(os.environ[VLLM_PYTHON_ENV], smollm2_base, port, served_name=smollm2_base.name,
                           lora_modules={str(SHIPPED_ACTOR): SHIPPED_ACTOR})
    with running_vllm(command, port, tmp_path_factory.mktemp("vllm") / "vllm.log", threads=2) as server:
        yield server
