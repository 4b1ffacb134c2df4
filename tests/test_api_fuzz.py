"""Schemathesis fuzzes the OpenAPI schema of every service built by the factory: no 5xx, no response
that violates its own schema. A service joins by existing: every `services/<name>/app.py` is picked up."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
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
    return {"WEBRL_ACTOR_MODEL": str(actor), "WEBRL_ORM_MODEL": str(actor), "WEBRL_CRITIC_MODEL": str(critic)}


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A private embedded home with tiny models (built once for the module)."""
    home = tmp_path_factory.mktemp("fuzz-home")
    return {"WEBRL_HOME": str(home), **_tiny_models(home)}


@pytest.fixture
def service_app(request: pytest.FixtureRequest, fuzz_env: dict[str, str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The service's app rebuilt under the fuzz settings (services read settings when their module loads)."""
    for var in ("WEBRL_DATABASE_URL", "WEBRL_BROKER_URL", "WEBRL_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    for var, value in fuzz_env.items():
        monkeypatch.setenv(var, value)
    get_settings.cache_clear()
    upgrade(get_settings())
    module = importlib.reload(importlib.import_module(f"services.{request.param}.app"))
    yield module.app
    get_settings.cache_clear()


@pytest.mark.parametrize("service_app", SERVICES, indirect=True)
def test_service_openapi_survives_fuzzing(service_app, request: pytest.FixtureRequest) -> None:  # type: ignore[no-untyped-def]
    service = request.node.callspec.params["service_app"]
    schema = schemathesis.openapi.from_asgi("/openapi.json", service_app)
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]

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
        test = operation.as_strategy()
        try:
            settings(max_examples=EXAMPLES.get(service, DEFAULT_EXAMPLES), deadline=None,
                     suppress_health_check=list(HealthCheck), database=None)(
                _given(test, run_operation)
            )()
        except Exception as exc:  # collect all operations' failures, report together
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


def _given(strategy, fn):  # type: ignore[no-untyped-def]
    from hypothesis import given

    return given(strategy)(fn)


def test_every_service_of_the_design_is_fuzzed() -> None:
    """The six services DESIGN.md names all exist and are picked up (a missing app.py fails here)."""
    assert SERVICES == ["actor", "browser_pool", "critic", "orm", "taskgen", "trainer"]
