"""Schemathesis fuzzes the OpenAPI schema of every service built by the factory: no 5xx, no response
that violates its own schema, on SQLite and on PostgreSQL. A service joins by existing: every
`services/<name>/app.py` is picked up.

A second pass sends the same operations hostile input: schemathesis' requests with some strings (values and keys)
replaced by lone surrogates, NUL characters, huge text or URLs that do not parse, and some values by deeply
nested or huge structures. Any answer but a 5xx will do (a 413, a 422 naming the field)."""

from __future__ import annotations

import functools
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from webrl.config import get_settings
from webrl.db.migrate import upgrade

SERVICES_DIR = Path(__file__).resolve().parents[1] / "services"
SERVICES = sorted(p.parent.name for p in SERVICES_DIR.glob("*/app.py"))

EXAMPLES = {"browser_pool": 6}  # each browser_pool example opens a real Chromium episode
DEFAULT_EXAMPLES = 25
UPSTREAM_503 = {("actor", "/v1/agent/run")}  # runs through the browser pool service, which the fuzz env lacks
CALL_TIMEOUT_S = 120  # a fuzzed request may start a browser or run a real (tiny) model on a busy CPU
DATABASES = ["sqlite", "postgres"]
HOSTILE_EXAMPLES = {"browser_pool": 4}
DEFAULT_HOSTILE_EXAMPLES = 12

# ---- hostile input ----------------------------------------------------------------------------------------
URL_SAFE_HOSTILE = st.one_of(  # what a path or a query string can carry
    st.sampled_from(["\x00", "key\x00", "http://[::1", "../../../etc/passwd", "\u202e", "\U0001F600", "%", " "]),
    st.builds(lambda unit, n: unit * n, st.sampled_from(["x", "<a>", "é"]), st.integers(2_000, 50_000)),
)
HOSTILE_TEXT = st.one_of(  # what a JSON string can carry besides
    URL_SAFE_HOSTILE,
    st.sampled_from(["\ud800", "a\udfffb", "\udc00\x00"]),
    st.text(st.characters(categories=["Cs", "Cc"]), min_size=1, max_size=4),
    st.builds(lambda unit, n: unit * n, st.sampled_from(["x", "<a id=1>", "é"]), st.integers(100_000, 400_000)),
)


def _nest(depth: int, as_dict: bool) -> Any:
    return functools.reduce(lambda inner, _: {"a": inner} if as_dict else [inner], range(depth), "x")


HOSTILE_VALUE = st.one_of(
    HOSTILE_TEXT,
    st.builds(_nest, st.integers(30, 400), st.booleans()),  # nested deeper than any schema
    st.builds(lambda n: list(range(n)), st.integers(5_000, 100_000)),  # huge lists
    st.sampled_from([2**70, -(2**70), 1e308, -1, 0, True, None, {}, []]),
)


@st.composite
def hostile(draw: st.DrawFn, value: Any, text: st.SearchStrategy[str] = HOSTILE_TEXT) -> Any:
    """``value`` with some strings (values and keys) and some leaves replaced by hostile ones."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out[draw(text) if draw(st.integers(0, 5)) == 0 else key] = draw(hostile(item, text))
        if draw(st.integers(0, 3)) == 0:
            out[draw(text)] = draw(HOSTILE_VALUE)
        return out
    if isinstance(value, list):
        return [draw(hostile(item, text)) for item in value] + draw(st.lists(HOSTILE_VALUE, max_size=2))
    if draw(st.integers(0, 2)) > 0:
        return value
    return draw(text) if isinstance(value, str) else draw(HOSTILE_VALUE)


@st.composite
def hostile_case(draw: st.DrawFn, operation: Any) -> schemathesis.Case:
    """A schemathesis case of ``operation`` made hostile: its JSON body, query and path parameters."""
    case = draw(operation.as_strategy())
    if isinstance(case.body, dict | list):  # JSON with \u escapes: any str survives it
        case.body = json.dumps(draw(hostile(case.body))).encode()
    for name in ("query", "path_parameters"):
        params = getattr(case, name)
        if params:
            setattr(case, name, {k: draw(st.one_of(st.just(v), URL_SAFE_HOSTILE)) if isinstance(v, str) else v
                                 for k, v in params.items()})
    return case


def _tiny_models(home: Path) -> dict[str, str]:
    """A test-size Llama and a critic on it, so the model-backed routes really run (never a 503 for want
    of a model)."""
    from webrl.models.critic import CriticModel
    from webrl.models.tiny import build_tiny_folder

    corpus = ['do(action="Click", element="3")', "exit(message=\"42\")", "Show me the reviews of the mug",
              "<html> <button id=\"1\"> Search </button> </html>", "YES", "NO"]
    actor = build_tiny_folder(corpus * 8, home / "actor", size="test", vocab_size=300, seed=0)
    critic = home / "critic"
    from transformers import AutoTokenizer

    CriticModel.from_backbone(actor).save_pretrained(critic, tokenizer=AutoTokenizer.from_pretrained(actor))
    return {"WEBRL_ACTOR__MODEL": str(actor), "WEBRL_ORM__MODEL": str(actor), "WEBRL_CRITIC__MODEL": str(critic)}


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A private embedded home with tiny models (built once for the module)."""
    home = tmp_path_factory.mktemp("fuzz-home")
    return {"WEBRL_HOME": str(home), **_tiny_models(home)}


@pytest.fixture
def service_app(request: pytest.FixtureRequest, fuzz_env: dict[str, str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The service's app rebuilt under the fuzz settings (services read settings when their module loads), on
    the test's database (SQLite in the fuzz home, or a fresh PostgreSQL database)."""
    for var in ("WEBRL_DATABASE__URL", "WEBRL_JOBS__BROKER_URL", "WEBRL_SECURITY__API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var, value in fuzz_env.items():
        monkeypatch.setenv(var, value)
    if request.node.callspec.params["database"] == "postgres":
        monkeypatch.setenv("WEBRL_DATABASE__URL", request.getfixturevalue("postgres_url"))
    get_settings.cache_clear()
    upgrade(get_settings())
    module = importlib.reload(importlib.import_module(f"services.{request.param}.app"))
    yield module.app
    get_settings.cache_clear()


def _fuzz(service: str, app: Any, cases: Any, examples: int, checks: list[Any]) -> None:
    """Run ``cases(operation)`` on every operation of ``app`` (but /metrics and /readyz); fail with every
    operation's failure at once."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)

    def run_operation(case: schemathesis.Case) -> None:
        response = case.call(timeout=CALL_TIMEOUT_S)
        if (service, case.operation.path) in UPSTREAM_503 and response.status_code == 503:
            assert "browser pool" in response.text, response.text  # the missing upstream is named
            return
        case.validate_response(response, checks=checks)

    failures = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path.startswith(("/metrics", "/readyz")):
            continue
        try:
            settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)(
                _given(cases(operation), run_operation)
            )()
        except Exception as exc:  # collect all operations' failures, report together
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("service_app", SERVICES, indirect=True)
def test_service_openapi_survives_fuzzing(service_app, database: str, request: pytest.FixtureRequest) -> None:  # type: ignore[no-untyped-def]
    service = request.node.callspec.params["service_app"]
    _fuzz(service, service_app, lambda operation: operation.as_strategy(), EXAMPLES.get(service, DEFAULT_EXAMPLES),
          [not_a_server_error, status_code_conformance, response_schema_conformance])


@pytest.mark.parametrize("database", DATABASES)
@pytest.mark.parametrize("service_app", SERVICES, indirect=True)
def test_service_survives_hostile_input(service_app, database: str, request: pytest.FixtureRequest) -> None:  # type: ignore[no-untyped-def]
    """Lone surrogates, NUL, huge and nested input: no 5xx on SQLite and on PostgreSQL (NUL in a key used to
    be a 500 on PostgreSQL, a lone surrogate one wherever text reached a tokenizer or the database)."""
    service = request.node.callspec.params["service_app"]
    _fuzz(service, service_app, hostile_case, HOSTILE_EXAMPLES.get(service, DEFAULT_HOSTILE_EXAMPLES),
          [not_a_server_error])


def _given(strategy, fn):  # type: ignore[no-untyped-def]
    from hypothesis import given

    return given(strategy)(fn)


def test_every_service_of_the_design_is_fuzzed() -> None:
    """The six services docs/design.md names all exist and are picked up (a missing app.py fails here)."""
    assert SERVICES == ["actor", "browser_pool", "critic", "orm", "taskgen", "trainer"]
